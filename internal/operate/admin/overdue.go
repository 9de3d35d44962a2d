package admin

import (
	"fmt"
	"net/http"

	"github.com/postingsvc/posting/internal/operate/overdue"
)

// overduePosts answers the overdue posts, longest overdue first, each with
// why it is stuck, and the count and age of all of them: overdue.List with
// Config.OverdueGrace, by the database's clock (Config.Now does not apply:
// the grace is measured as serve's check measures it).
func (s *server) overduePosts(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitQuery(w, r, overdue.DefaultListLimit, overdue.MaxListLimit)
	if !ok {
		return
	}
	posts, sum, err := overdue.List(r.Context(), s.cfg.DB, s.cfg.OverdueGrace, limit)
	if err != nil {
		s.internal(w, r, fmt.Errorf("list overdue posts: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, overdue.NewListJSON(posts, sum, s.cfg.OverdueGrace))
}
