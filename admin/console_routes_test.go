package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/admin"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
)

// consolePatterns are the only admin routes reachable without the token:
// the console's page and files, which hold no data.
var consolePatterns = map[string]bool{
	"GET /admin": true, "GET /admin/{$}": true, "GET /admin/console.js": true, "GET /admin/console.css": true,
}

// TestEveryDataRouteNeedsToken walks every admin route, so a route added
// later without the token check fails here.
func TestEveryDataRouteNeedsToken(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	routes, err := admin.Routes(admin.Config{DB: db.DB, Token: token, AuthFailures: -1})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	for pattern := range routes {
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{id}", "1", "{$}", "").Replace(path)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		if consolePatterns[pattern] {
			require.NotEqual(t, http.StatusUnauthorized, rec.Code, pattern)
			require.NotContains(t, rec.Body.String(), `"items"`, pattern)
			continue
		}
		require.Equal(t, http.StatusUnauthorized, rec.Code, "%s answered without the token", pattern)
	}
}

func TestConsolePage(t *testing.T) {
	t.Parallel()
	routes, err := admin.Routes(admin.Config{DB: databasetest.NewSQLite(t).DB, Token: token})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	for path, ctype := range map[string]string{"/admin/": "text/html", "/admin/console.js": "text/javascript", "/admin/console.css": "text/css"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		require.Equal(t, http.StatusOK, rec.Code, path)
		require.True(t, strings.HasPrefix(rec.Header().Get("Content-Type"), ctype), "%s: %s", path, rec.Header().Get("Content-Type"))
		require.Contains(t, rec.Header().Get("Content-Security-Policy"), "script-src 'self'", path)
		require.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"))
		require.NotEmpty(t, rec.Body.Bytes())
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/admin", nil))
	require.Equal(t, http.StatusMovedPermanently, rec.Code)
	require.Equal(t, "/admin/", rec.Header().Get("Location"))
}

func TestHistory(t *testing.T) {
	t.Parallel()
	_, err := admin.NewHistory(admin.HistoryConfig{})
	require.ErrorContains(t, err, "admin.HistoryConfig.DB")
	db := databasetest.NewSQLite(t)
	_, err = admin.NewHistory(admin.HistoryConfig{DB: db.DB, Interval: time.Millisecond})
	require.ErrorContains(t, err, "admin.HistoryConfig.Interval")
	_, err = admin.NewHistory(admin.HistoryConfig{DB: db.DB, Interval: time.Second, Window: 3 * time.Hour})
	require.ErrorContains(t, err, "admin.HistoryConfig.Window")

	h, err := admin.NewHistory(admin.HistoryConfig{DB: db.DB})
	require.NoError(t, err)
	require.Equal(t, admin.DefaultHistoryInterval, h.Config().Interval)
	require.Equal(t, admin.DefaultHistoryWindow, h.Config().Window)

	now := t0
	h, err = admin.NewHistory(admin.HistoryConfig{DB: db.DB, Interval: time.Second, Window: 3 * time.Second,
		Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.Empty(t, h.Samples())
	ctx := context.Background()
	// Five samples into a ring of three, the outbox growing by a row each
	// time: the last three remain, oldest first.
	for i := range 5 {
		f := &fixture{db: db}
		m := f.append(t, int64(i+1))
		if i == 4 {
			f.set(t, m.ID, outbox.StatusFail)
		}
		now = t0.Add(time.Duration(i) * time.Second)
		s, err := h.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, now, s.At)
	}
	samples := h.Samples()
	require.Len(t, samples, 3)
	for i, s := range samples {
		require.Equal(t, t0.Add(time.Duration(i+2)*time.Second), s.At)
	}
	require.EqualValues(t, 3, samples[0].Counts[outbox.StatusPending])
	require.EqualValues(t, 4, samples[1].Counts[outbox.StatusPending])
	require.EqualValues(t, 4, samples[2].Counts[outbox.StatusPending])
	require.EqualValues(t, 1, samples[2].Failed)
	require.NotNil(t, samples[2].OldestWaitingSeconds)

	// The route answers them with the interval and window.
	f := setup(t, db)
	routes, err := admin.Routes(admin.Config{DB: db.DB, Token: token, History: h})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, hh := range routes {
		mux.Handle(pattern, hh)
	}
	f.h = mux
	rec, body := f.do(t, "GET", "/admin/outbox/history", "Bearer "+token)
	require.Equal(t, http.StatusOK, rec.Code)
	require.EqualValues(t, 1, body["intervalSeconds"])
	require.EqualValues(t, 3, body["windowSeconds"])
	require.Len(t, body["samples"], 3)

	// Start samples at once (the 1s interval is far off) and Stop waits
	// for the loop.
	now = t0.Add(time.Minute)
	require.NoError(t, h.Start(ctx))
	deadline := time.Now().Add(10 * time.Second)
	for h.Samples()[2].At != now {
		require.True(t, time.Now().Before(deadline), "no sample from Start")
		time.Sleep(5 * time.Millisecond)
	}
	h.Stop()
	require.Equal(t, t0.Add(3*time.Second), h.Samples()[0].At, "the oldest was dropped")
}

func TestRecentPosts(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := setup(t, db)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		var ids []float64
		for _, title := range []string{"one", "two", "three"} {
			p, err := svc.Create(t.Context(), reservation.CreateInput{Title: title, Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			ids = append(ids, float64(p.ID))
		}
		_, err = svc.Cancel(t.Context(), int64(ids[0]))
		require.NoError(t, err)

		rec, body := f.do(t, "GET", "/admin/posts?limit=2", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		items := body["items"].([]any)
		require.Len(t, items, 2)
		require.Equal(t, ids[2], items[0].(map[string]any)["id"], "newest first")
		require.Equal(t, "three", items[0].(map[string]any)["title"])
		require.Equal(t, ids[1], items[1].(map[string]any)["id"])

		rec, body = f.do(t, "GET", "/admin/posts", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		items = body["items"].([]any)
		require.Len(t, items, 3)
		require.Equal(t, "CANCELLED", items[2].(map[string]any)["status"])

		for _, bad := range []string{"0", "101", "x"} {
			rec, body = f.do(t, "GET", "/admin/posts?limit="+bad, "Bearer "+token)
			require.Equal(t, http.StatusBadRequest, rec.Code)
			require.Equal(t, "limit", body["field"])
		}
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "three")
	})
}
