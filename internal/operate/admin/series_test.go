package admin_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// createSeries makes a weekly series in Tokyo starting tomorrow at 09:00.
func createSeries(t *testing.T, svc *reservation.Service, title string) *reservation.SeriesView {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	d := time.Now().In(loc).AddDate(0, 0, 1)
	start := time.Date(d.Year(), d.Month(), d.Day(), 9, 0, 0, 0, time.UTC) // wall time
	v, err := svc.CreateSeries(t.Context(), reservation.SeriesInput{Title: title, Content: "c", TimeZone: "Asia/Tokyo",
		Start: start, RRule: "FREQ=WEEKLY"})
	require.NoError(t, err)
	return v
}

// GET /admin/series answers the latest series of every owner, newest first,
// with their next occurrences; its limit is checked like the posts'.
func TestRecentSeries(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := setup(t, db)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		var ids []float64
		for _, title := range []string{"one", "two", "three"} {
			ids = append(ids, float64(createSeries(t, svc, title).ID))
		}
		_, err = svc.CancelSeries(t.Context(), int64(ids[0]))
		require.NoError(t, err)

		rec, body := f.do(t, "GET", "/admin/series?limit=2", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		items := body["items"].([]any)
		require.Len(t, items, 2)
		first := items[0].(map[string]any)
		require.Equal(t, ids[2], first["id"], "newest first")
		require.Equal(t, "three", first["title"])
		require.Len(t, first["nextOccurrences"], reservation.NextOccurrencesShown)

		rec, body = f.do(t, "GET", "/admin/series", "Bearer "+token)
		require.Equal(t, http.StatusOK, rec.Code)
		items = body["items"].([]any)
		require.Len(t, items, 3)
		require.Equal(t, "CANCELLED", items[2].(map[string]any)["status"])
		require.Empty(t, items[2].(map[string]any)["nextOccurrences"])

		rec, body = f.do(t, "GET", "/admin/series?limit=101", "Bearer "+token)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Equal(t, "limit", body["field"])
		rec, _ = f.do(t, "GET", "/admin/series", "Bearer wrong")
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	})
}

// The console lists the series with their zone, rule and next
// occurrences, a title with markup shown as text.
func TestConsoleListsSeries(t *testing.T) {
	execPath := chromium(t)
	db := databasetest.NewSQLite(t)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	const title = `<img src=x onerror="window.__xss=1">Weekly`
	v := createSeries(t, svc, title)
	srv := httptest.NewServer(routesMux(t, admin.Config{DB: db.DB, Token: token, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	tab := browser(t, execPath)
	row := `#series tr[data-id="` + strconv.FormatInt(v.ID, 10) + `"]`
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(srv.URL+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", token),
		chromedp.Click("#signin-button"),
		chromedp.WaitVisible(row),
	))
	text, err := chromedp.Run(tab, chromedp.Text(row))
	require.NoError(t, err)
	require.Contains(t, text, title, "the title as text")
	require.Contains(t, text, "Asia/Tokyo")
	require.Contains(t, text, "FREQ=WEEKLY")
	require.Contains(t, text, reservation.FormatLocalTime(v.Next[0].Local)[:10], "the next occurrence's local date")
	injected, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#series img").length + (window.__xss === undefined ? 0 : 1000)`))
	require.NoError(t, err)
	require.Zero(t, injected)
}
