package e2e_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
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

	// The broker goes away in the middle of the minute and comes back,
	// half a second after posts came due: the worker loses its partitions
	// a moment after the broker, and a publication whose webhook call is
	// in flight then is cancelled and made again by the next owner (at
	// least once towards the publisher, with the same Idempotency-Key).
	// On a loaded machine that moment can meet the publications of the
	// next due instant: the posts due within 2 s of the stop may be
	// called twice, every other post once.
	time.Sleep(time.Until(start.Add(25*time.Second + 500*time.Millisecond)))
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
	calls := hookCalls()
	require.Len(t, calls, posts)
	for id, n := range calls {
		if at := due[id]; !at.Before(stopped) && at.Before(stopped.Add(2*time.Second)) {
			require.LessOrEqual(t, n, 2, "webhook calls for post %d, due %s after the stop", id, at.Sub(stopped))
			continue
		}
		require.Equal(t, 1, n, "webhook calls for post %d", id)
	}
	for name, l := range map[string][]time.Duration{"all posts": lags, "posts due before the pause": before} {
		slices.Sort(l)
		t.Logf("publication lag of %d %s: median %s, p95 %s, max %s", len(l), name, l[len(l)/2].Round(time.Millisecond),
			l[len(l)*95/100].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond))
	}
}

// End to end on PostgreSQL + RabbitMQ: two serve instances and a worker;
// one serve is killed with SIGKILL after taking its share of the posts.
// Every post ends PUBLISHED, published once (one webhook call), none early.
func TestEndToEndOnPostgresAndRabbitMQ(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "e2erabbit")
	exchange, group := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, url, exchange, group, group+".dead")

	srv, hookCalls := countingWebhook(t)

	env := []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_RABBITMQ_URL=" + url, "POSTING_RABBITMQ_EXCHANGE=" + exchange,
		"POSTING_WORKER_GROUP=" + group, "POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s",
		"POSTING_RELAY_INTERVAL=100ms"}
	var serves []*postingtest.Proc
	for i := range 2 {
		serves = append(serves, postingtest.StartFreshServe(t, append([]string{fmt.Sprintf("POSTING_INSTANCE_ID=e2e-serve-%d", i)}, env...)...))
	}
	worker := postingtest.StartFreshWorker(t, append([]string{"POSTING_INSTANCE_ID=e2e-worker", "POSTING_PUBLISH_WEBHOOK_URL=" + srv.URL}, env...)...)

	const posts = 60
	start := time.Now().Truncate(time.Second)
	due := map[int64]time.Time{}
	for i := range posts {
		at := start.Add(6*time.Second + time.Duration(i)*20*time.Second/posts).Truncate(time.Second)
		p := postingtest.CreatePost(t, serves[i%2].HTTP, at)
		due[int64(p["id"].(float64))] = at
	}
	// Kill one serve while its scheduler and relay are busy.
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	require.NoError(t, serves[0].Cmd.Process.Kill())
	<-serves[0].Done

	// A claim held by the killed relay waits out the stale limit (2 min).
	db := waitPublished(t, dbURL, posts, 4*time.Minute)

	var all []reservation.Post
	require.NoError(t, db.DB.Find(&all).Error)
	require.Len(t, all, posts)
	hook := hookCalls()
	for _, p := range all {
		require.Equal(t, 1, hook[p.ID], "post %d: webhook calls", p.ID)
		require.NotNil(t, p.PublishedAt)
		require.False(t, p.PublishedAt.Before(due[p.ID]), "post %d published early", p.ID)
	}
	code, body := postingtest.HTTPGet(worker.HTTP, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
}

// Started in the README's order on a fresh broker, serve before any worker
// ever ran: serve declares and binds the worker group's queue itself, so
// the events it sends meanwhile wait there instead of coming back
// unroutable and ending FAIL. The worker, started once serve has sent
// everything, publishes every post.
func TestServeBeforeTheFirstWorkerOnAFreshBrokerLosesNothing(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.FreshVhost(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "startorder")
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	env := []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_RABBITMQ_URL=" + url,
		"POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s", "POSTING_RELAY_INTERVAL=100ms",
		"POSTING_RELAY_MAX_RETRIES=1"}
	addr := postingtest.StartFreshServe(t, env...).HTTP

	const posts = 5
	for range posts {
		postingtest.CreatePost(t, addr, time.Now().Add(5*time.Second))
	}
	db, err := database.Open(dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	// Every event (CREATED and the reservation of each post) has had its
	// outcome before any worker runs: sent, or (unroutable) failed for good.
	require.Eventually(t, func() bool {
		c := relaytest.CountByStatus(t, db.DB)
		return c[outbox.StatusSent]+c[outbox.StatusFail] == 2*posts
	}, time.Minute, 100*time.Millisecond)
	require.Zero(t, relaytest.CountByStatus(t, db.DB)[outbox.StatusFail], "events sent before the first worker ended FAIL")

	postingtest.StartFreshWorker(t, append([]string{"POSTING_PUBLISH_WEBHOOK_URL=" + hook.URL}, env...)...)
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("status = ?", reservation.StatusPublished).Count(&n).Error)
		return n == posts
	}, time.Minute, 100*time.Millisecond, "not every post was published")
}
