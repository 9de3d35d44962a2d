package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
)

// Two serve and a worker, all through PgBouncer in transaction pooling
// with the direct URL for migrations and LISTEN, and one serve killed with
// SIGKILL halfway through the posts: every post the API answered 201 for
// is published once, the webhook hears of each once, and neither the
// pooler nor the kill leaves an error in the survivors' logs.
func TestTwoServesAndAWorkerThroughPgBouncerPublishEveryPostOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes up to two minutes (a killed claim waits out the stale limit)")
	}
	const posts = 60
	direct := databasetest.PostgresURL(t, "e2epgb")
	pooled := pgbouncertest.Start(t, direct, pgbouncertest.Transaction)
	b := kafkatest.Start(t)
	hook, hookCalls := countingWebhook(t)
	common := []string{"POSTING_DATABASE_URL=" + pooled, "POSTING_DATABASE_DIRECT_URL=" + direct,
		"POSTING_KAFKA_BROKERS=" + b.Addr, "POSTING_DATA_DIR=" + t.TempDir()}
	serveEnv := append([]string{"POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s",
		"POSTING_RELAY_INTERVAL=500ms", "POSTING_RELAY_STALE_AFTER=80s", "POSTING_API_WRITE_RATE=off"}, common...)
	var serves []*postingtest.Proc
	for _, id := range []string{"pgb-a", "pgb-b"} {
		addr := postingtest.FreeAddr(t)
		serves = append(serves, postingtest.StartServe(t, append([]string{"POSTING_HTTP_ADDR=" + addr, "POSTING_INSTANCE_ID=" + id}, serveEnv...)...))
	}
	wk := startWebhookWorker(t, "pgb-worker", hook.URL, common)

	start := time.Now().Truncate(time.Second)
	for i := range posts {
		s := serves[i%2]
		if i >= posts/2 {
			s = serves[1]
		}
		if i == posts/2 {
			// Serve a dies without a word, events of its posts maybe
			// claimed and unsent.
			require.NoError(t, serves[0].Cmd.Process.Kill())
			<-serves[0].Done
		}
		postingtest.CreatePost(t, s.HTTP, start.Add(5*time.Second+time.Duration(i)*10*time.Second/posts))
	}

	requirePublishedOnce(t, direct, posts, 3*time.Minute, hookCalls)
	for _, p := range []*postingtest.Proc{serves[1], wk} {
		out := p.Out.String()
		require.NotContains(t, out, "prepared statement", out)
		require.NotContains(t, out, "does not receive notifications", out)
		require.False(t, strings.Contains(out, "level=ERROR"), out)
	}
}

// serve and a worker through PgBouncer in transaction pooling with no
// direct URL: serve logs the one pooled-LISTEN warning and carries on, its
// relay woken by its own commits and polling, and every post created
// through it is published once.
func TestServeThroughPgBouncerWithoutDirectURLWarnsOnceAndPublishesEveryPost(t *testing.T) {
	t.Parallel()
	const posts = 20
	direct := databasetest.PostgresURL(t, "e2epgbnodirect")
	pooled := pgbouncertest.Start(t, direct, pgbouncertest.Transaction)
	b := kafkatest.Start(t)
	hook, hookCalls := countingWebhook(t)
	common := []string{"POSTING_DATABASE_URL=" + pooled, "POSTING_KAFKA_BROKERS=" + b.Addr, "POSTING_DATA_DIR=" + t.TempDir()}
	addr := postingtest.FreeAddr(t)
	serve := postingtest.StartServe(t, append([]string{"POSTING_HTTP_ADDR=" + addr, "POSTING_INSTANCE_ID=pgb-solo",
		"POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s", "POSTING_API_WRITE_RATE=off"}, common...)...)
	wk := startWebhookWorker(t, "pgb-solo-worker", hook.URL, common)

	start := time.Now().Truncate(time.Second)
	for i := range posts {
		postingtest.CreatePost(t, serve.HTTP, start.Add(5*time.Second+time.Duration(i)*5*time.Second/posts))
	}
	requirePublishedOnce(t, direct, posts, 2*time.Minute, hookCalls)

	out := serve.Out.String()
	require.Equal(t, 1, strings.Count(out, "pooler in transaction mode"), out)
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL", out)
	require.NotContains(t, out, "level=ERROR", out)
	require.NotContains(t, wk.Out.String(), "level=ERROR", wk.Out.String())
}

// startWebhookWorker starts `posting worker` as instance id with env,
// publishing to the webhook at hookURL.
func startWebhookWorker(t *testing.T, id, hookURL string, env []string) *postingtest.Proc {
	addr := postingtest.FreeAddr(t)
	return postingtest.StartBinary(t, addr, append([]string{"POSTING_WORKER_HTTP_ADDR=" + addr, "POSTING_INSTANCE_ID=" + id,
		"POSTING_PUBLISH_WEBHOOK_URL=" + hookURL}, env...), "worker")
}

// serve and a worker through a PgBouncer in transaction pooling whose pool
// is one server connection, far below the 20 each process's own pool may
// open (so no code path may hold a transaction while it waits for a second
// connection), and which is killed with SIGKILL and started again halfway:
// every post the API answered 201 for is published once, and the
// processes carry on after the pooler's restart without one of their own.
func TestServeAndWorkerThroughAOneConnectionPgBouncerRestartedMidRunPublishEveryPostOnce(t *testing.T) {
	t.Parallel()
	const posts = 20
	direct := databasetest.PostgresURL(t, "e2epgbrestart")
	bouncer := pgbouncertest.StartServer(t, direct, pgbouncertest.Transaction, 1)
	b := kafkatest.Start(t)
	hook, hookCalls := countingWebhook(t)
	common := []string{"POSTING_DATABASE_URL=" + bouncer.URL, "POSTING_DATABASE_DIRECT_URL=" + direct,
		"POSTING_KAFKA_BROKERS=" + b.Addr, "POSTING_DATA_DIR=" + t.TempDir()}
	addr := postingtest.FreeAddr(t)
	serve := postingtest.StartServe(t, append([]string{"POSTING_HTTP_ADDR=" + addr, "POSTING_INSTANCE_ID=pgb-restart",
		"POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s", "POSTING_RELAY_INTERVAL=500ms",
		"POSTING_API_WRITE_RATE=off"}, common...)...)
	startWebhookWorker(t, "pgb-restart-worker", hook.URL, common)

	start := time.Now().Truncate(time.Second)
	var created []int64
	for i := range posts {
		if i == posts/2 {
			bouncer.Restart(t)
		}
		// A request may meet a connection the restart cut: the client
		// tries again, as any would after a 500.
		var id int64
		require.Eventually(t, func() bool {
			var ok bool
			id, ok = tryCreatePost(serve.HTTP, start.Add(5*time.Second+time.Duration(i)*5*time.Second/posts))
			return ok
		}, 30*time.Second, 100*time.Millisecond, "post %d never created", i)
		created = append(created, id)
	}
	db := requirePublishedOnce(t, direct, posts, 2*time.Minute, hookCalls)
	var ob []outbox.Message
	require.NoError(t, db.DB.Find(&ob).Error)
	require.Len(t, ob, 2*posts)
	for _, r := range ob {
		require.Equal(t, outbox.StatusSent, r.Status, "row %d", r.ID)
		require.Zero(t, r.RetryCount, "row %d spent an attempt on the pooler's restart", r.ID)
	}
	require.NotContains(t, serve.Out.String(), "prepared statement", serve.Out.String())

	// Every statement of both processes since the restart ran on the
	// pooler's one server session: nothing of theirs outlived its
	// transaction there. (PgBouncer itself SETs the parameters it tracks
	// for each client.)
	pooled, err := database.Open(bouncer.URL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pooled.Close() })
	var left struct {
		Prepared, Listening, Locks int64
		Settings                   string
	}
	require.NoError(t, pooled.Raw(`SELECT
		(SELECT count(*) FROM pg_prepared_statements) AS prepared,
		(SELECT count(*) FROM pg_listening_channels()) AS listening,
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) AS locks,
		coalesce((SELECT string_agg(name || '=' || setting, ', ') FROM pg_settings WHERE source = 'session'
			AND name NOT IN ('client_encoding', 'DateStyle', 'TimeZone', 'standard_conforming_strings', 'application_name')), '') AS settings`).
		Scan(&left).Error)
	require.Zero(t, left.Prepared, "prepared statements left on the server session")
	require.Zero(t, left.Listening, "channels listened to on the server session")
	require.Zero(t, left.Locks, "advisory locks held")
	require.Empty(t, left.Settings, "settings SET on the server session")
}
