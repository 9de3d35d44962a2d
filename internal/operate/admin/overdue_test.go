package admin_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/operate/overdue/overduetest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// GET /admin/posts/overdue answers the count and oldest age of the overdue
// posts and the longest overdue ones, each with its reason, events and
// publication, by the grace serve passes; a bad limit is a 400 naming it.
func TestOverduePosts(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		seeded := overduetest.Seed(t, db)
		f := setup(t, db) // Config.Now is set: the route keeps the database's clock all the same
		rec, body := f.do(t, "GET", "/admin/posts/overdue", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.EqualValues(t, len(seeded.Overdue), body["count"])
		require.EqualValues(t, 300, body["graceSeconds"], "the default grace, 5m")
		require.InDelta(t, seeded.Ages[0].Seconds(), body["oldestSeconds"], 60)
		items := body["items"].([]any)
		require.Len(t, items, len(seeded.Overdue))
		for i, it := range items {
			item := it.(map[string]any)
			require.EqualValues(t, seeded.Overdue[i], item["postId"], "longest overdue first")
			require.Equal(t, string(seeded.Reasons[i]), item["reason"])
			require.InDelta(t, seeded.Ages[i].Seconds(), item["overdueSeconds"], 60)
			require.ElementsMatch(t, []string{"postId", "ownerId", "status", "scheduledAt", "publishBy", "overdueSeconds",
				"reason", "detail", "reannounced", "eventStatus", "publicationStatus", "publicationAttempts"}, keys(item))
			at, err := time.Parse(time.RFC3339Nano, item["scheduledAt"].(string))
			require.NoError(t, err)
			require.WithinDuration(t, seeded.Now.Add(-seeded.Ages[i]), at, time.Second)
			require.Equal(t, time.UTC, at.Location(), "RFC 3339 in UTC")
		}
		pending := items[4].(map[string]any)
		require.Equal(t, "publication_pending", pending["reason"])
		require.Equal(t, "PENDING", pending["publicationStatus"])
		require.EqualValues(t, 3, pending["publicationAttempts"])
		require.Equal(t, overduetest.ReceiverError, pending["detail"], "JSON carries the text as it came, escaped by JSON")
		require.NotContains(t, rec.Body.String(), "\x1b", "no raw escape byte in the answer")
		require.EqualValues(t, 2, items[3].(map[string]any)["reannounced"])
		notReserved := items[0].(map[string]any)
		require.Equal(t, "RESERVED", notReserved["status"])
		require.Nil(t, notReserved["eventStatus"])
		require.Nil(t, notReserved["publicationStatus"])
		require.Nil(t, notReserved["detail"])
		require.Nil(t, notReserved["publishBy"])

		rec, body = f.do(t, "GET", "/admin/posts/overdue?limit=2", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Len(t, body["items"], 2)
		require.EqualValues(t, len(seeded.Overdue), body["count"], "the count is of all")

		f.requireBadParams(t, "Bearer "+token,
			badParam{"GET", "/admin/posts/overdue?limit=0", "limit"},
			badParam{"GET", "/admin/posts/overdue?limit=1001", "limit"},
			badParam{"GET", "/admin/posts/overdue?limit=x", "limit"})

		// serve's POSTING_OVERDUE_AFTER, through Config.OverdueGrace.
		f.h = routesMux(t, admin.Config{DB: db.DB, Token: token, OverdueGrace: 5*time.Hour + 30*time.Minute,
			Logger: slog.New(slog.DiscardHandler)})
		rec, body = f.do(t, "GET", "/admin/posts/overdue", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		require.EqualValues(t, 2, body["count"], "the posts 7h and 6h overdue")
		require.EqualValues(t, 5.5*3600, body["graceSeconds"])
	})
}

// An empty answer is a list, not null, with count and age 0.
func TestOverduePostsNone(t *testing.T) {
	t.Parallel()
	f := setup(t, databasetest.NewSQLite(t))
	rec, _ := f.do(t, "GET", "/admin/posts/overdue", "Bearer "+token)
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"count":0,"oldestSeconds":0,"graceSeconds":300,"items":[]}`, rec.Body.String())
}

func TestOverdueGraceMustBePositive(t *testing.T) {
	t.Parallel()
	_, err := admin.Routes(admin.Config{DB: databasetest.NewSQLite(t).DB, Token: token, OverdueGrace: -time.Second})
	require.ErrorContains(t, err, "admin.Config.OverdueGrace")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
