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

	"github.com/postingsvc/posting/admin"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
)

// A post's title comes from any API caller and a FAIL row's last_error
// from a broker: the console shows both as text. Markup in them makes no
// element and runs no script in the real page.
func TestConsoleShowsMarkupAsText(t *testing.T) {
	execPath := chromium(t)
	db := databasetest.NewSQLite(t)
	ctx := t.Context()
	posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	const title = `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><b>bold</b>`
	const lastError = `<svg onload="window.__xss=3"></svg><a href="javascript:window.__xss=4">x</a>`
	p, err := posts.Create(ctx, reservation.CreateInput{Title: title, Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	res := db.Exec("UPDATE outbox SET status = 'FAIL', retry_count = 3, last_error = ? WHERE aggregate_id = ?", lastError, p.ID)
	require.NoError(t, res.Error)
	require.EqualValues(t, 1, res.RowsAffected)
	var failID int64
	require.NoError(t, db.Raw("SELECT id FROM outbox WHERE aggregate_id = ?", p.ID).Scan(&failID).Error)

	routes, err := admin.Routes(admin.Config{DB: db.DB, Token: token, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tab := browser(t, execPath)
	failRow := `#fail-rows tr[data-id="` + strconv.FormatInt(failID, 10) + `"]`
	postRow := `#posts tr[data-id="` + strconv.FormatInt(p.ID, 10) + `"]`
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(srv.URL+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", token),
		chromedp.Click("#signin-button"),
		chromedp.WaitVisible(failRow),
		chromedp.WaitVisible(postRow),
	))
	shownTitle, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+postRow+` td:nth-child(2)').textContent`))
	require.NoError(t, err)
	require.Equal(t, title, shownTitle, "the title as text")
	shownError, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+failRow+` td.error-text').textContent`))
	require.NoError(t, err)
	require.Equal(t, lastError, shownError, "last_error as text")
	injected, err := chromedp.Run(tab, chromedp.Evaluate[int](
		`document.querySelectorAll("#posts img, #posts script, #posts b, #fail-rows svg, #fail-rows a").length +
		 (window.__xss === undefined ? 0 : 1000)`))
	require.NoError(t, err)
	require.Zero(t, injected, "no element made from the data, no script run")
}
