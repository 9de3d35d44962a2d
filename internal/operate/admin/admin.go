// Package admin serves the operator tools of the outbox and the worker over
// HTTP, behind a bearer token, with the console that shows them.
package admin

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// DefaultPurgeBudget is Config.PurgeBudget's default: a third of the
// HTTP server's default write timeout (60s), which leaves room for the
// statement in flight, the count of what remains and a slow client.
const DefaultPurgeBudget = 20 * time.Second

// Config configures the admin routes.
type Config struct {
	// DB is the database whose outbox and publications the routes operate
	// on. Required when Token is set.
	DB *gorm.DB
	// Token is the bearer token. Empty: no routes.
	Token string
	// Now, if set, replaces the database's clock (database.Now) for
	// requeue, discard, purge and the stats' ages; tests set it. The
	// default is the database's clock because those times meet times the
	// relays wrote (next_attempt_at, sent_at, created).
	Now func() time.Time
	// Logger receives an audit line per change and internal errors.
	// Default slog.Default().
	Logger *slog.Logger
	// PurgeBatchSize is the rows per DELETE of POST /admin/outbox/purge.
	// Default outbox.DefaultPurgeBatchSize (500); 1..outbox.MaxPurgeBatchSize.
	PurgeBatchSize int
	// PurgePause is the wait between two DELETEs of a purge. Default
	// outbox.DefaultPurgePause (100ms); -1 for none.
	PurgePause time.Duration
	// PurgeBudget is how long POST /admin/outbox/purge deletes before it
	// answers what it did and what remains, for the operator to call again:
	// it must answer well inside the server's write timeout, or the client
	// gets an empty reply. Default DefaultPurgeBudget (20s); positive.
	PurgeBudget time.Duration
	// History, if set, answers GET /admin/outbox/history with its samples;
	// nil answers no samples. The caller starts and stops it.
	History *History
	// AuthFailures is the failed authentications allowed per source address
	// in AuthFailureWindow; past it the source is answered 429 until the
	// window ends. Default DefaultAuthFailures (5); -1: no bound.
	AuthFailures int
	// AuthFailureWindow is the window of AuthFailures. Default
	// DefaultAuthFailureWindow (1m); at least 1s.
	AuthFailureWindow time.Duration
	// ObserveAuthFailure, if set, is called with the outcome (AuthMissing,
	// AuthInvalid, AuthLimited) of every refused authentication: a metric.
	ObserveAuthFailure func(outcome string)
	// OverdueGrace is how long past its scheduledAt a post may be before
	// GET /admin/posts/overdue lists it: serve passes its
	// POSTING_OVERDUE_AFTER, so the route lists what the check counts.
	// Default overdue.DefaultConfig().Grace (5m); positive.
	OverdueGrace time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PurgeBatchSize == 0 {
		c.PurgeBatchSize = outbox.DefaultPurgeBatchSize
	}
	if c.PurgeBudget == 0 {
		c.PurgeBudget = DefaultPurgeBudget
	}
	if c.AuthFailures == 0 {
		c.AuthFailures = DefaultAuthFailures
	}
	if c.AuthFailureWindow == 0 {
		c.AuthFailureWindow = DefaultAuthFailureWindow
	}
	if c.OverdueGrace == 0 {
		c.OverdueGrace = overdue.DefaultConfig().Grace
	}
	switch c.PurgePause {
	case 0:
		c.PurgePause = outbox.DefaultPurgePause
	case -1:
		c.PurgePause = 0
	}
}

// Validate reports a missing or out-of-range setting of enabled routes, as a
// *config.Error naming the field.
func (c Config) Validate() error {
	const f = "admin.Config."
	switch {
	case c.DB == nil:
		return config.Invalid(f+"DB", nil, "must be set")
	case c.PurgeBatchSize < 1 || c.PurgeBatchSize > outbox.MaxPurgeBatchSize:
		return config.Invalid(f+"PurgeBatchSize", c.PurgeBatchSize, "want 1..%d", outbox.MaxPurgeBatchSize)
	case c.PurgePause < 0:
		return config.Invalid(f+"PurgePause", c.PurgePause, "negative")
	case c.PurgeBudget <= 0:
		return config.Invalid(f+"PurgeBudget", c.PurgeBudget, "must be positive")
	case len(c.Token) < MinTokenBytes:
		// The token itself is never shown.
		return config.Invalid(f+"Token", nil, "must be at least %d bytes, got %d", MinTokenBytes, len(c.Token))
	case c.AuthFailures < -1:
		return config.Invalid(f+"AuthFailures", c.AuthFailures, "want -1 (no bound) or more than 0")
	case c.AuthFailureWindow < time.Second:
		return config.Invalid(f+"AuthFailureWindow", c.AuthFailureWindow, "want at least 1s")
	case c.OverdueGrace <= 0:
		return config.Invalid(f+"OverdueGrace", c.OverdueGrace, "must be positive")
	}
	return nil
}

// Routes returns the admin routes keyed by net/http pattern, each behind the
// bearer token check, or an empty map when cfg.Token is empty: admin
// endpoints are off unless a token is configured. The routes:
//
//	GET  /admin/outbox/stats              counts, oldest waiting row, what FAIL rows block
//	GET  /admin/outbox?status=FAIL&limit= rows of a status, oldest first (default FAIL, limit 50, max 1000)
//	POST /admin/outbox/{id}/requeue       FAIL → PENDING with retries reset
//	POST /admin/outbox/{id}/discard       give up on a FAIL row; it stays in the history
//	POST /admin/outbox/requeue-failed     requeue every FAIL row not discarded
//	POST /admin/outbox/purge?olderThan=   delete SENT rows sent longer ago than a duration (default 168h)
//	                                      for at most PurgeBudget, answering what was deleted and what remains
//	GET  /admin/publications?status=FAILED&limit=&after=
//	                                      publications of a status by post id (default FAILED, limit 50, max 1000)
//	POST /admin/publications/{id}/retry   FAILED → PENDING for the worker, while the post is WORKING
//	GET  /admin/outbox/history            the History's samples of the outbox, oldest first
//	GET  /admin/posts?limit=              the latest posts, newest first (default 20, max 100)
//	GET  /admin/posts/overdue?limit=      the overdue posts and why each is stuck, longest overdue
//	                                      first, with their count and oldest age (default 100, max 1000)
//	GET  /admin/series?limit=             the latest recurring series with their next occurrences,
//	                                      newest first (default 20, max 100)
//	GET  /admin/                          the operator console (console.go); the page itself
//	                                      is public and holds no data, it asks the routes above
func Routes(cfg Config) (map[string]http.Handler, error) {
	if cfg.Token == "" {
		return map[string]http.Handler{}, nil
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid admin config: %w", err)
	}
	s := &server{cfg: cfg, log: cfg.Logger.With("component", "admin")}
	tokenSum := sha256.Sum256([]byte(cfg.Token))
	var counter *failureCounter
	if cfg.AuthFailures > 0 {
		counter = &failureCounter{limit: cfg.AuthFailures, window: cfg.AuthFailureWindow, now: time.Now,
			maxSources: maxSources, sources: map[string]*failures{}}
	}
	protect := func(h http.HandlerFunc) http.Handler {
		return &authorized{tokenSum: tokenSum, next: h, failures: counter, log: s.log, observe: cfg.ObserveAuthFailure}
	}
	return map[string]http.Handler{
		"GET /admin/outbox/stats":             protect(s.stats),
		"GET /admin/outbox":                   protect(s.list),
		"POST /admin/outbox/{id}/requeue":     protect(s.requeue),
		"POST /admin/outbox/{id}/discard":     protect(s.discard),
		"POST /admin/outbox/requeue-failed":   protect(s.requeueFailed),
		"POST /admin/outbox/purge":            protect(s.purge),
		"GET /admin/publications":             protect(s.publications),
		"POST /admin/publications/{id}/retry": protect(s.retryPublication),
		"GET /admin/outbox/history":           protect(s.history),
		"GET /admin/posts":                    protect(s.recentPosts),
		"GET /admin/posts/overdue":            protect(s.overduePosts),
		"GET /admin/series":                   protect(s.recentSeries),
		"GET /admin":                          http.RedirectHandler("/admin/", http.StatusMovedPermanently),
		"GET /admin/{$}":                      consoleFile("index.html"),
		"GET /admin/console.js":               consoleFile("console.js"),
		"GET /admin/console.css":              consoleFile("console.css"),
	}, nil
}

type server struct {
	cfg Config
	log *slog.Logger
}

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	now, ok := s.now(w, r)
	if !ok {
		return
	}
	st, err := outbox.Stats(r.Context(), s.cfg.DB, now)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// listResponse is the answer of GET /admin/outbox.
type listResponse struct {
	Items []outbox.Entry `json:"items"`
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	status, limit, ok := listQuery(w, r, outbox.ParseStatus, outbox.StatusFail, outbox.DefaultListLimit, outbox.MaxListLimit)
	if !ok {
		return
	}
	items, err := outbox.List(r.Context(), s.cfg.DB, status, limit)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listResponse{Items: items})
}

// listQuery reads the query of a list request: status, parsed by parse
// (def when absent), and limit in 1..maxLimit (defLimit when absent). On a
// bad one it answers 400 and returns false.
func listQuery[S any](w http.ResponseWriter, r *http.Request, parse func(string) (S, error), def S, defLimit, maxLimit int) (S, int, bool) {
	q := r.URL.Query()
	status := def
	if v := q.Get("status"); v != "" {
		st, err := parse(v)
		if err != nil {
			response.WriteProblem(w, http.StatusBadRequest, "status: "+err.Error(), "status")
			return status, 0, false
		}
		status = st
	}
	limit, ok := limitQuery(w, r, defLimit, maxLimit)
	return status, limit, ok
}

// limitQuery reads ?limit= in 1..maxLimit, def when absent. On a bad one it
// answers 400 naming limit and returns false.
func limitQuery(w http.ResponseWriter, r *http.Request, def, maxLimit int) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		response.WriteProblem(w, http.StatusBadRequest, fmt.Sprintf("limit: %q is not a number in 1..%d", v, maxLimit), "limit")
		return 0, false
	}
	return n, true
}

func (s *server) requeue(w http.ResponseWriter, r *http.Request) {
	s.rowAction(w, r, "requeue", outbox.Requeue)
}

func (s *server) discard(w http.ResponseWriter, r *http.Request) {
	s.rowAction(w, r, "discard", outbox.Discard)
}

// audit logs a change an operator made, as one line with msg "audit": the
// action, the ids it touched (outbox ids, or post ids for publications), and
// the source: the client's address (behind a proxy, the proxy's). The admin
// token is one shared secret, so the line cannot name a person.
func (s *server) audit(r *http.Request, action string, ids []int64, attrs ...slog.Attr) {
	if ids == nil {
		ids = []int64{}
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "audit", append([]slog.Attr{
		slog.String("action", action), slog.Any("ids", ids), slog.String("source", r.RemoteAddr)}, attrs...)...)
}

// rowAction runs requeue or discard on the row of the path and answers the
// row after the change, 404 for an unknown id and 409 for a row in the
// wrong state.
func (s *server) rowAction(w http.ResponseWriter, r *http.Request, verb string,
	fn func(ctx context.Context, db *gorm.DB, ids []int64, now time.Time) []outbox.RowResult) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	now, ok := s.now(w, r)
	if !ok {
		return
	}
	res := fn(r.Context(), s.cfg.DB, []int64{id}, now)[0]
	switch {
	case res.Err == nil:
		s.audit(r, "outbox."+verb, []int64{id},
			slog.String("event_id", res.Row.EventID), slog.Int64("post_id", res.Row.PostID))
		writeJSON(w, http.StatusOK, res.Row)
	case errors.Is(res.Err, outbox.ErrNotFound):
		response.WriteProblem(w, http.StatusNotFound, res.Err.Error(), "")
	case errors.Is(res.Err, outbox.ErrNotFailed), errors.Is(res.Err, outbox.ErrDiscarded), errors.Is(res.Err, outbox.ErrConflict):
		response.WriteProblem(w, http.StatusConflict, res.Err.Error(), "")
	default:
		s.internal(w, r, res.Err)
	}
}

// countResponse answers POST /admin/outbox/requeue-failed.
type countResponse struct {
	Requeued int `json:"requeued"`
}

// purgeResponse answers POST /admin/outbox/purge: what this call deleted
// and what it left (outbox.PurgeResult), for the operator to call again
// until Complete.
type purgeResponse struct {
	Deleted   int       `json:"deleted"`
	Remaining int       `json:"remaining"`
	Complete  bool      `json:"complete"`
	Before    time.Time `json:"sentBefore"`
}

func (s *server) requeueFailed(w http.ResponseWriter, r *http.Request) {
	now, ok := s.now(w, r)
	if !ok {
		return
	}
	n, err := outbox.RequeueAllFailed(r.Context(), s.cfg.DB, now, 0)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.audit(r, "outbox.requeue_failed", nil, slog.Int("requeued", n))
	writeJSON(w, http.StatusOK, countResponse{Requeued: n})
}

func (s *server) purge(w http.ResponseWriter, r *http.Request) {
	// Without olderThan, the default of `posting outbox purge --older-than`
	// and of the cleaner's Retention.
	d := outbox.DefaultRetention
	if raw := r.URL.Query().Get("olderThan"); raw != "" {
		var err error
		d, err = time.ParseDuration(raw)
		if err != nil || d <= 0 {
			response.WriteProblem(w, http.StatusBadRequest, fmt.Sprintf("olderThan: %q is not a positive Go duration such as 168h", raw), "olderThan")
			return
		}
	}
	now, ok := s.now(w, r)
	if !ok {
		return
	}
	cutoff := database.Normalize(now.Add(-d))
	res, err := outbox.PurgeWithin(r.Context(), s.cfg.DB, cutoff, s.cfg.PurgeBatchSize, s.cfg.PurgePause, s.cfg.PurgeBudget)
	if res.Deleted > 0 || err == nil {
		// Rows deleted before a failure are gone all the same.
		s.audit(r, "outbox.purge", nil, slog.Int("deleted", res.Deleted), slog.Int("remaining", res.Remaining),
			slog.Bool("complete", res.Complete), slog.Time("sent_before", cutoff))
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, purgeResponse{Deleted: res.Deleted, Remaining: res.Remaining, Complete: res.Complete, Before: cutoff})
}

// publicationsResponse is the answer of GET /admin/publications.
type publicationsResponse struct {
	Items []worker.PublicationEntry `json:"items"`
}

func (s *server) publications(w http.ResponseWriter, r *http.Request) {
	status, limit, ok := listQuery(w, r, worker.ParsePublicationStatus, worker.PublicationFailed,
		worker.DefaultPublicationListLimit, worker.MaxPublicationListLimit)
	if !ok {
		return
	}
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			response.WriteProblem(w, http.StatusBadRequest, fmt.Sprintf("after: %q is not a post id", v), "after")
			return
		}
		after = n
	}
	items, err := worker.ListPublications(r.Context(), s.cfg.DB, status, limit, after)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, publicationsResponse{Items: items})
}

// retryPublication hands the FAILED publication of the path's post back to
// the worker and answers it, 404 for an unknown post id and 409 when it is
// not FAILED, its post is not WORKING, or it changed meanwhile.
func (s *server) retryPublication(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	res := worker.RetryPublications(r.Context(), s.cfg.DB, []int64{id})[0]
	switch {
	case res.Err == nil:
		s.audit(r, "publications.retry", []int64{id}, slog.String("event_id", res.Publication.EventID))
		writeJSON(w, http.StatusOK, res.Publication)
	case errors.Is(res.Err, worker.ErrPublicationNotFound):
		response.WriteProblem(w, http.StatusNotFound, res.Err.Error(), "")
	case errors.Is(res.Err, worker.ErrPublicationNotFailed), errors.Is(res.Err, worker.ErrPostNotWorking),
		errors.Is(res.Err, worker.ErrPublicationConflict):
		response.WriteProblem(w, http.StatusConflict, res.Err.Error(), "")
	default:
		s.internal(w, r, res.Err)
	}
}

// pathID is the row or post id of the path; a malformed one is answered
// (400) and pathID returns false.
func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		response.WriteProblem(w, http.StatusBadRequest, fmt.Sprintf("id: %q is not a positive integer", raw), "id")
		return 0, false
	}
	return id, true
}

// now is Config.Now if set, else the database's clock; when the clock
// cannot be read it answers the request (500) and returns false.
func (s *server) now(w http.ResponseWriter, r *http.Request) (time.Time, bool) {
	if s.cfg.Now != nil {
		return s.cfg.Now(), true
	}
	now, err := database.Now(r.Context(), s.cfg.DB)
	if err != nil {
		s.internal(w, r, err)
		return time.Time{}, false
	}
	return now, true
}

// internal logs err and answers a bare 500: its text may name tables or hosts.
func (s *server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.LogAttrs(r.Context(), slog.LevelError, "admin request failed",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
	response.WriteProblem(w, http.StatusInternalServerError, "internal error; see the server log", "")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		response.WriteProblem(w, http.StatusInternalServerError, "internal error", "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
