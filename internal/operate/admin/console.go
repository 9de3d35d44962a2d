package admin

import (
	"embed"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strconv"

	"github.com/postingsvc/posting/internal/write/reservation"
)

// The operator console: plain HTML, CSS and JavaScript, embedded in the
// binary, nothing to build. The page holds no data: it signs in with the
// admin token, keeps it in the tab's sessionStorage and reads everything
// from the admin routes with "Authorization: Bearer", which answer 401
// without it.
//
//go:embed console
var consoleFS embed.FS

// consoleCSP keeps the page to its own files: no inline script, no third
// party, no framing (a framed console could be clicked into requeueing).
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// consoleFile serves one embedded file of the console.
func consoleFile(name string) http.Handler {
	body, err := consoleFS.ReadFile("console/" + name)
	if err != nil {
		// The names are constants of Routes and the files are embedded:
		// only a broken build gets here.
		panic(fmt.Sprintf("admin console file %s: %v", name, err))
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if path.Ext(name) == ".js" {
		ctype = "text/javascript; charset=utf-8" // the OS table may lack or differ on .js
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	})
}

// historyResponse is the answer of GET /admin/outbox/history.
type historyResponse struct {
	IntervalSeconds float64  `json:"intervalSeconds"`
	WindowSeconds   float64  `json:"windowSeconds"`
	Samples         []Sample `json:"samples"`
}

func (s *server) history(w http.ResponseWriter, _ *http.Request) {
	out := historyResponse{Samples: []Sample{}}
	if h := s.cfg.History; h != nil {
		out.IntervalSeconds = h.cfg.Interval.Seconds()
		out.WindowSeconds = h.cfg.Window.Seconds()
		out.Samples = h.Samples()
	}
	writeJSON(w, http.StatusOK, out)
}

// Limits of GET /admin/posts.
const (
	// DefaultRecentPosts is the posts GET /admin/posts answers without ?limit=.
	DefaultRecentPosts = 20
	// MaxRecentPosts bounds ?limit= of GET /admin/posts.
	MaxRecentPosts = 100
)

// postsResponse is the answer of GET /admin/posts.
type postsResponse struct {
	Items []reservation.PostJSON `json:"items"`
}

// recentPosts answers the latest posts of every owner, newest first, as the
// API shows a post. It reads by primary key, newest first, so it costs
// limit rows whatever the table holds.
func (s *server) recentPosts(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitQuery(w, r, DefaultRecentPosts, MaxRecentPosts)
	if !ok {
		return
	}
	var posts []reservation.Post
	if err := s.cfg.DB.WithContext(r.Context()).Order("id DESC").Limit(limit).Find(&posts).Error; err != nil {
		s.internal(w, r, fmt.Errorf("read recent posts: %w", err))
		return
	}
	out := postsResponse{Items: make([]reservation.PostJSON, 0, len(posts))}
	for i := range posts {
		out.Items = append(out.Items, reservation.NewPostJSON(&posts[i]))
	}
	writeJSON(w, http.StatusOK, out)
}
