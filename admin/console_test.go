package admin_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/admin"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/reservation"
)

// kafkaInvalidRecord is a produce error the relay counts as a rejection
// (it spends an attempt), so a rejected key ends FAIL.
const kafkaInvalidRecord int16 = 87

// chromium finds a Chromium to drive, or skips the test: browser tests run
// wherever one is installed, and must run where
// POSTING_TEST_REQUIRE_BROWSER=1 (CI installs one and sets it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("POSTING_TEST_REQUIRE_BROWSER") == "1" {
		t.Fatal("no chromium on PATH and POSTING_TEST_REQUIRE_BROWSER=1 (install it: apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH; set POSTING_TEST_REQUIRE_BROWSER=1 to fail instead")
	return ""
}

// browser starts a headless Chromium with a fresh profile and nothing
// running in the background, and returns a tab's context.
func browser(t *testing.T, execPath string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root in a container
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
	})
	return ctx
}

// TestConsoleInBrowser drives the real console in headless Chromium
// against a database whose relay sends to an in-process Kafka broker: a
// wrong token shows an error and no data; the right one shows a FAIL row
// the broker caused, with the row it blocks; Requeue takes it off the list
// and the relay then sends it (SENT in the database).
//
// With POSTING_CONSOLE_SCREENSHOT=path it saves a screenshot of the console
// with data there (docs/console.png is made so).
func TestConsoleInBrowser(t *testing.T) {
	execPath := chromium(t)
	db := databasetest.NewSQLite(t)
	ctx := t.Context()
	quiet := slog.New(slog.DiscardHandler)

	history, err := admin.NewHistory(admin.HistoryConfig{DB: db.DB, Interval: 200 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, history.Start(ctx))
	t.Cleanup(history.Stop)

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
			time.Sleep(20 * time.Millisecond)
		}
	}
	posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	at := time.Now().Add(2 * time.Hour).UTC()
	var ids []int64
	for _, title := range []string{"Launch announcement", "Weekly digest", "Maintenance window", "Release notes 1.4"} {
		p, err := posts.Create(ctx, reservation.CreateInput{Title: title, Content: "…", ScheduledAt: at})
		require.NoError(t, err)
		ids = append(ids, p.ID)
		at = at.Add(30 * time.Minute)
	}
	bad := ids[0]
	// The chart's history shows them waiting before the relay starts.
	waitFor("a sample of the waiting posts", func() bool {
		s := history.Samples()
		return len(s) > 0 && s[len(s)-1].Counts[outbox.StatusPending] == int64(len(ids))
	})

	// The broker rejects the first post's events until told otherwise: its
	// CREATED event ends FAIL after 1 + 1 attempts.
	broker := kafkatest.Start(t)
	stopRejecting := broker.RejectKey(strconv.FormatInt(bad, 10), kafkaInvalidRecord)
	producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic}, quiet)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	rel, err := relay.New(outbox.NewStore(db), producer, relay.Config{InstanceID: "console-test",
		Interval: 20 * time.Millisecond, MaxRetries: relay.Retries(1), RetryBase: 10 * time.Millisecond,
		RetryMax: 20 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, rel.Start(ctx))
	t.Cleanup(rel.Stop)

	rowsOf := func(post int64) []outbox.Entry {
		var es []outbox.Entry
		require.NoError(t, db.WithContext(ctx).Where("aggregate_id = ?", post).Order("id").Find(&es).Error)
		return es
	}
	waitFor("the rejected event to be FAIL", func() bool { return rowsOf(bad)[0].Status == outbox.StatusFail })
	failID := rowsOf(bad)[0].ID
	// A later event of the same post waits behind the FAIL row.
	title := "Launch announcement (v2)"
	_, err = posts.Update(ctx, bad, reservation.UpdateInput{Title: &title})
	require.NoError(t, err)
	stopRejecting()
	waitFor("the other posts' events to be SENT", func() bool {
		for _, id := range ids[1:] {
			if rowsOf(id)[0].Status != outbox.StatusSent {
				return false
			}
		}
		return true
	})
	blockedID := rowsOf(bad)[1].ID
	require.Equal(t, outbox.StatusPending, rowsOf(bad)[1].Status, "held behind the FAIL row")

	routes, err := admin.Routes(admin.Config{DB: db.DB, Token: token, Logger: quiet, History: history})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tab := browser(t, execPath)
	failRow := `#fail-rows tr[data-id="` + strconv.FormatInt(failID, 10) + `"]`

	// A wrong token: an error, the console hidden, no data in the page.
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(srv.URL+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", "not-the-token"),
		chromedp.Click("#signin-button"),
		chromedp.WaitVisible("#signin-error"),
	))
	msg, err := chromedp.Run(tab, chromedp.Text("#signin-error"))
	require.NoError(t, err)
	require.Contains(t, msg, "not valid")
	shown, err := chromedp.Run(tab, chromedp.Evaluate[int](
		`document.querySelectorAll("#fail-rows tr, #posts tr, #chart svg").length +
		 (document.getElementById("console").hidden ? 0 : 1000) +
		 (sessionStorage.length * 100)`))
	require.NoError(t, err)
	require.Zero(t, shown, "no data, no console, no token kept after a refused token")

	// The right token: the FAIL row with the row it blocks, the counts, the
	// chart and the recent posts.
	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys("#token", token),
		chromedp.Click("#signin-button"),
		chromedp.WaitVisible(failRow),
		chromedp.WaitVisible("#chart polyline"),
		chromedp.WaitVisible(`#posts tr[data-id="`+strconv.FormatInt(bad, 10)+`"]`),
	))
	row, err := chromedp.Run(tab, chromedp.Text(failRow))
	require.NoError(t, err)
	require.Contains(t, row, "rows "+strconv.FormatInt(blockedID, 10), "the blocked row is shown")
	require.Contains(t, row, "INVALID_RECORD", "the broker's error is shown")
	failCount, err := chromedp.Run(tab, chromedp.Text("#count-FAIL"))
	require.NoError(t, err)
	require.Equal(t, "1", failCount)
	postRows, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#posts tr").length`))
	require.NoError(t, err)
	require.Equal(t, len(ids), postRows)

	if path := os.Getenv("POSTING_CONSOLE_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}

	// Requeue: the row leaves the list, and the relay sends it and the row
	// it held.
	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(failRow+" button.requeue"),
		chromedp.WaitNotPresent(failRow),
	))
	waitFor("the requeued event and the one it held to be SENT", func() bool {
		rows := rowsOf(bad)
		return rows[0].Status == outbox.StatusSent && rows[1].Status == outbox.StatusSent
	})
	require.Equal(t, failID, rowsOf(bad)[0].ID)
}

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
