package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

// A sub that differs from alice's only by trailing spaces is another
// caller, but MySQL's PAD SPACE collations (utf8mb4_bin included) compare
// "alice " equal to "alice": such a token must not reach alice's posts on
// any dialect. The verifier refuses it, so no post can be owned by it
// either.
func TestSubWithTrailingSpaceIsNotAlice(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		e := apiSetup(t, db, func(c *api.Config) { c.Auth = verifier(t, testSecret, "") })
		id := idOf(t, e.createAs(t, tokenFor(t, "alice")))
		posts0, rows0 := counts(t, db.DB)
		spaced := tokenFor(t, "alice ")
		for _, r := range []struct{ method, path, body string }{
			{http.MethodGet, "/api/v1/posts/" + id, ""},
			{http.MethodGet, "/api/v1/posts", ""},
			{http.MethodPatch, "/api/v1/posts/" + id, `{"title":"taken"}`},
			{http.MethodPost, "/api/v1/posts/" + id + "/cancel", ""},
			{http.MethodPost, "/api/v1/posts", newPostBody},
		} {
			resp, body := e.doAs(t, spaced, r.method, r.path, r.body)
			requireProblem(t, resp, body, http.StatusUnauthorized)
			require.Equal(t, `Bearer error="invalid_token"`, resp.Header.Get("WWW-Authenticate"))
		}
		posts, rows := counts(t, db.DB)
		require.Equal(t, posts0, posts)
		require.Equal(t, rows0, rows)
		post := loadPost(t, db.DB, id)
		require.Equal(t, "t", post.Title)
		require.EqualValues(t, 1, post.Version.Int64)
	})
}
