package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// e2eRun runs one command of the binary in this process until the test ends,
// and fails the test if it returns an error.
func e2eRun(t *testing.T, out io.Writer, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, out, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "posting %s", args[0])
		case <-time.After(60 * time.Second):
			t.Errorf("posting %s did not stop", args[0])
		}
	})
}

// The whole lifecycle on MariaDB and on PostgreSQL with the in-process
// broker: 200 posts reserved over HTTP with times spread over the next
// minute, `posting serve` (API, scheduler with a short lead, relay) and
// `posting worker` (publishing through a webhook) running, and the broker
// down for 20 seconds in the middle. Every post ends PUBLISHED, none before
// its time, none later than its time plus the pause plus a few seconds, and
// the webhook hears of each post exactly once.
func TestEndToEndPublishesEveryPostOnceThroughABrokerPause(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes about 80 s")
	}
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			endToEnd(t, databasetest.URL(t, d, "e2e"))
		})
	}
}

// countingWebhook is a webhook receiver that counts its calls per post;
// calls returns a copy of the counts.
func countingWebhook(t *testing.T) (srv *httptest.Server, calls func() map[int64]int) {
	t.Helper()
	var (
		mu   sync.Mutex
		hook = map[int64]int{} // webhook calls per post
	)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p api.PostJSON
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || r.Header.Get("Idempotency-Key") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		hook[p.ID]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[int64]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(hook)
	}
}

// requireOneCallPerPost checks that the webhook heard of posts posts, each
// once.
func requireOneCallPerPost(t *testing.T, calls map[int64]int, posts int) {
	t.Helper()
	require.Len(t, calls, posts)
	for id, n := range calls {
		require.Equal(t, 1, n, "webhook calls for post %d", id)
	}
}

// waitPublished opens the database of dbURL and waits up to within for
// posts posts to be PUBLISHED; it returns the database, closed when the
// test ends.
func waitPublished(t *testing.T, dbURL string, posts int64, within time.Duration) *database.DB {
	t.Helper()
	db, err := database.Open(dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("status = ?", reservation.StatusPublished).Count(&n).Error)
		return n == posts
	}, within, 200*time.Millisecond, "not every post was published")
	return db
}

func endToEnd(t *testing.T, dbURL string) {
	const (
		posts = 200
		pause = 20 * time.Second
		slack = 15 * time.Second // relay outage backoff, consumer rejoin, a noisy machine
	)
	b := kafkatest.Start(t, kafkatest.WithDataDir(t.TempDir()))

	srv, hookCalls := countingWebhook(t)

	logs := &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve and worker output:\n%s", logs.String())
		}
	})
	httpAddr := freeAddr(t)
	common := []string{"--database-url", dbURL, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir()}
	e2eRun(t, logs, append([]string{"serve", "--http-addr", httpAddr, "--instance-id", "e2e-serve",
		"--scheduler-spec", "@every 1s", "--reservation-lead", "3s", "--relay-interval", "100ms",
		"--relay-batch-size", "500", "--api-write-rate", "off"}, common...)...) // 200 posts at once from one address
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "serve never became ready")
	e2eRun(t, logs, append([]string{"worker", "--instance-id", "e2e-worker", "--worker-http-addr", "",
		"--publish-webhook-url", srv.URL}, common...)...)

	start := time.Now().Truncate(time.Second)
	due := map[int64]time.Time{}
	for i := range posts {
		at := start.Add(8*time.Second + time.Duration(i)*50*time.Second/posts).Truncate(time.Second)
		p := createPost(t, httpAddr, at)
		due[int64(p["id"].(float64))] = at
	}
	t.Logf("%d posts reserved in %s, due from %s to %s", posts, time.Since(start).Round(time.Millisecond),
		start.Add(8*time.Second).Format(time.TimeOnly), start.Add(58*time.Second).Format(time.TimeOnly))

	// The broker goes away in the middle of the minute and comes back.
	time.Sleep(time.Until(start.Add(25 * time.Second)))
	stopped := time.Now()
	b.Stop()
	t.Logf("broker stopped at %s", time.Now().Format(time.TimeOnly))
	time.Sleep(pause)
	b.Restart(t)
	t.Logf("broker restarted at %s", time.Now().Format(time.TimeOnly))

	db := waitPublished(t, dbURL, posts, time.Until(start.Add(58*time.Second+pause+slack+10*time.Second)))

	var all []reservation.Post
	require.NoError(t, db.DB.Find(&all).Error)
	require.Len(t, all, posts)
	var lags, before []time.Duration
	for _, p := range all {
		require.NotNil(t, p.PublishedAt, "post %d", p.ID)
		lag := p.PublishedAt.Sub(due[p.ID])
		require.GreaterOrEqual(t, lag, time.Duration(0), "post %d published before its time", p.ID)
		require.LessOrEqual(t, lag, pause+slack, "post %d published %s after its time", p.ID, lag)
		lags = append(lags, lag)
		if due[p.ID].Before(stopped) {
			before = append(before, lag)
		}
	}
	var pubs []worker.Publication
	require.NoError(t, db.DB.Find(&pubs).Error)
	require.Len(t, pubs, posts)
	for _, p := range pubs {
		require.Equal(t, worker.PublicationPublished, p.Status, "post %d", p.PostID)
	}
	requireOneCallPerPost(t, hookCalls(), posts)
	for name, l := range map[string][]time.Duration{"all posts": lags, "posts due before the pause": before} {
		slices.Sort(l)
		t.Logf("publication lag of %d %s: median %s, p95 %s, max %s", len(l), name, l[len(l)/2].Round(time.Millisecond),
			l[len(l)*95/100].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond))
	}
}
