package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
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
		// A zone far from UTC: a time the page showed in the browser's
		// local time would differ from the UTC everything else shows.
		chromedp.Env("TZ=Pacific/Kiritimati"),
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
	// A post two hours past its time that no scheduler made WORKING: overdue.
	stuck := ids[3]
	require.NoError(t, db.Exec("UPDATE posts SET scheduled_at = ? WHERE id = ?",
		database.Normalize(time.Now().Add(-2*time.Hour)), stuck).Error)

	mux := routesMux(t, admin.Config{DB: db.DB, Token: token, Logger: quiet, History: history})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tab := browser(t, execPath)
	failRow := `#fail-rows tr[data-id="` + strconv.FormatInt(failID, 10) + `"]`
	overdueRow := `#overdue-rows tr[data-id="` + strconv.FormatInt(stuck, 10) + `"]`

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
		`document.querySelectorAll("#fail-rows tr, #posts tr, #overdue-rows tr, #chart svg").length +
		 (document.getElementById("console").hidden ? 0 : 1000) +
		 (sessionStorage.length * 100)`))
	require.NoError(t, err)
	require.Zero(t, shown, "no data, no console, no token kept after a refused token")

	// The right token: the FAIL row with the row it blocks, the counts, the
	// chart, the recent posts and the overdue post with its reason.
	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys("#token", token),
		chromedp.Click("#signin-button"),
		chromedp.WaitVisible(failRow),
		chromedp.WaitVisible("#chart polyline"),
		chromedp.WaitVisible(`#posts tr[data-id="`+strconv.FormatInt(bad, 10)+`"]`),
		chromedp.WaitVisible(overdueRow),
	))
	late, err := chromedp.Run(tab, chromedp.Text(overdueRow))
	require.NoError(t, err)
	require.Contains(t, late, "not_reserved", "the reason is shown")
	require.Contains(t, late, "RESERVED")
	require.Contains(t, late, "2.0 h", "overdue for two hours")
	overdueCount, err := chromedp.Run(tab, chromedp.Text("#count-overdue"))
	require.NoError(t, err)
	require.Equal(t, "1", overdueCount)
	row, err := chromedp.Run(tab, chromedp.Text(failRow))
	require.NoError(t, err)
	require.Contains(t, row, "rows "+strconv.FormatInt(blockedID, 10), "the blocked row is shown")
	require.Contains(t, row, "INVALID_RECORD", "the broker's error is shown")
	failCount, err := chromedp.Run(tab, chromedp.Text("#count-FAIL"))
	require.NoError(t, err)
	require.Equal(t, "1", failCount)
	updated, err := chromedp.Run(tab, chromedp.Text("#updated"))
	require.NoError(t, err)
	require.Regexp(t, `^updated \d\d:\d\d:\d\dZ$`, updated, "the page's times are UTC, as everything else")
	stamp, err := time.Parse("15:04:05Z", strings.TrimPrefix(updated, "updated "))
	require.NoError(t, err)
	now := time.Now().UTC()
	gap := now.Sub(time.Date(now.Year(), now.Month(), now.Day(), stamp.Hour(), stamp.Minute(), stamp.Second(), 0, time.UTC))
	require.True(t, gap.Abs() < time.Hour || (24*time.Hour-gap.Abs()) < time.Hour, "updated %s is UTC, not the browser's zone (now %s)", updated, now)
	postRows, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#posts tr").length`))
	require.NoError(t, err)
	require.Equal(t, len(ids), postRows)

	if path := os.Getenv("POSTING_CONSOLE_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}

	// The page refreshes itself: once the post is cancelled it leaves the
	// overdue list, with no click.
	require.NoError(t, db.Exec("UPDATE posts SET status = 'CANCELLED' WHERE id = ?", stuck).Error)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitNotPresent(overdueRow),
		chromedp.WaitVisible("#overdue-empty"),
	))
	overdueCount, err = chromedp.Run(tab, chromedp.Text("#count-overdue"))
	require.NoError(t, err)
	require.Equal(t, "0", overdueCount)

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
	// An overdue post whose publication a webhook receiver refused with markup.
	const receiverError = `<iframe src="javascript:window.__xss=5"></iframe><img src=x onerror="window.__xss=6">`
	late, err := posts.Create(ctx, reservation.CreateInput{Title: "late", Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	past := database.Normalize(time.Now().Add(-time.Hour))
	require.NoError(t, db.Exec("UPDATE posts SET status = 'WORKING', scheduled_at = ? WHERE id = ?", past, late.ID).Error)
	refusal := receiverError
	require.NoError(t, db.Create(&worker.Publication{PostID: late.ID, EventID: "0193a1b2-0000-7000-8000-000000000001",
		ScheduledAt: past, Status: worker.PublicationFailed, Attempts: 1, LastError: &refusal, CreatedAt: past, UpdatedAt: past}).Error)

	mux := routesMux(t, admin.Config{DB: db.DB, Token: token, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tab := browser(t, execPath)
	failRow := `#fail-rows tr[data-id="` + strconv.FormatInt(failID, 10) + `"]`
	postRow := `#posts tr[data-id="` + strconv.FormatInt(p.ID, 10) + `"]`
	overdueRow := `#overdue-rows tr[data-id="` + strconv.FormatInt(late.ID, 10) + `"]`
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(srv.URL+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", token),
		chromedp.Click("#signin-button"),
		chromedp.WaitVisible(failRow),
		chromedp.WaitVisible(postRow),
		chromedp.WaitVisible(overdueRow),
	))
	shownDetail, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+overdueRow+` td.error-text').textContent`))
	require.NoError(t, err)
	require.Equal(t, receiverError, shownDetail, "the receiver's answer as text")
	shownTitle, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+postRow+` td:nth-child(2)').textContent`))
	require.NoError(t, err)
	require.Equal(t, title, shownTitle, "the title as text")
	shownError, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+failRow+` td.error-text').textContent`))
	require.NoError(t, err)
	require.Equal(t, lastError, shownError, "last_error as text")
	injected, err := chromedp.Run(tab, chromedp.Evaluate[int](
		`document.querySelectorAll("#posts img, #posts script, #posts b, #fail-rows svg, #fail-rows a, #overdue-rows iframe, #overdue-rows img").length +
		 (window.__xss === undefined ? 0 : 1000)`))
	require.NoError(t, err)
	require.Zero(t, injected, "no element made from the data, no script run")
}

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
	mux := routesMux(t, admin.Config{DB: databasetest.NewSQLite(t).DB, Token: token})
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
