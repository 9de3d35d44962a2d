package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database/databasetest"
)

// The write limit is one budget per caller across every write route, as
// Config.WriteLimit says: a caller that spent it on creates cannot go on
// writing through PATCH and cancel, each of which used to have a limiter
// (and a budget) of its own.
func TestWriteLimitSharedAcrossRoutes(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), func(c *api.Config) {
		c.Auth = verifier(t, testSecret, "")
		c.WriteLimit = api.WriteLimit{Requests: 2, Window: time.Hour}
	})
	alice := tokenFor(t, "alice")
	id := idOf(t, e.createAs(t, alice))
	e.createAs(t, alice)
	posts0, rows0 := counts(t, e.db.DB)
	resp, body := e.doAs(t, alice, http.MethodPatch, "/api/v1/posts/"+id, `{"title":"x"}`)
	requireProblem(t, resp, body, http.StatusTooManyRequests)
	resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/posts/"+id+"/cancel", "")
	requireProblem(t, resp, body, http.StatusTooManyRequests)
	posts, rows := counts(t, e.db.DB)
	require.Equal(t, posts0, posts)
	require.Equal(t, rows0, rows, "a 429 writes nothing")
	post := loadPost(t, e.db.DB, id)
	require.Equal(t, "t", post.Title)
	require.EqualValues(t, "RESERVED", post.Status)
}
