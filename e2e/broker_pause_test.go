package e2e_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

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
	httpAddr := postingtest.FreeAddr(t)
	common := []string{"--database-url", dbURL, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir()}
	run(t, logs, append([]string{"serve", "--http-addr", httpAddr, "--instance-id", "e2e-serve",
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
	run(t, logs, append([]string{"worker", "--instance-id", "e2e-worker", "--worker-http-addr", "",
		"--publish-webhook-url", srv.URL}, common...)...)

	start := time.Now().Truncate(time.Second)
	due := map[int64]time.Time{}
	for i := range posts {
		at := start.Add(8*time.Second + time.Duration(i)*50*time.Second/posts).Truncate(time.Second)
		p := postingtest.CreatePost(t, httpAddr, at)
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
