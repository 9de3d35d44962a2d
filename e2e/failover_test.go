package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// failoverScript is the script that makes the primary and its standby.
const failoverScript = "../scripts/pgfailover/pgfailover.sh"

// pgFailover runs the failover script with args, failing the test on error.
func pgFailover(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(failoverScript, args...).CombinedOutput()
	require.NoError(t, err, "pgfailover.sh %s: %s", strings.Join(args, " "), out)
}

// requireFailoverTools skips the test without Debian's PostgreSQL 15
// binaries, or fails it under POSTING_TEST_REQUIRE_FAILOVER=1.
func requireFailoverTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"/usr/lib/postgresql/15/bin/initdb", "/usr/lib/postgresql/15/bin/pg_basebackup", "/usr/lib/postgresql/15/bin/psql"} {
		if _, err := os.Stat(tool); err != nil {
			if os.Getenv("POSTING_TEST_REQUIRE_FAILOVER") == "1" {
				t.Fatalf("failover test required (POSTING_TEST_REQUIRE_FAILOVER=1) but %s is missing (apt-get install postgresql-15)", tool)
			}
			t.Skipf("skipping: %s missing (apt-get install postgresql-15), or POSTING_TEST_REQUIRE_FAILOVER=1 to fail instead", tool)
		}
	}
}

// startFailoverPair makes a primary and its synchronous standby with the
// failover script (removed when the test ends) and the posting database on
// them: the script's directory, the primary's and the standby's addresses,
// and the multi-host URL over both, primary first.
func startFailoverPair(t *testing.T) (dir, primary, standby, multi string) {
	t.Helper()
	requireFailoverTools(t)
	dir = filepath.Join(os.TempDir(), "pgfailover-"+strings.ReplaceAll(postingtest.FreeAddr(t), ":", "-"))
	primary, standby = postingtest.FreeAddr(t), postingtest.FreeAddr(t)
	t.Cleanup(func() { _ = exec.Command(failoverScript, "down", dir).Run() })
	pgFailover(t, "up", dir, port(primary), port(standby))
	out, err := exec.Command("psql", "-h", "127.0.0.1", "-p", port(primary), "-U", "postgres", "-c", "CREATE DATABASE posting").CombinedOutput()
	require.NoError(t, err, "%s", out)
	multi = fmt.Sprintf("postgres://postgres@%s,%s/posting?sslmode=disable&target_session_attrs=read-write", primary, standby)
	return dir, primary, standby, multi
}

// port is the port of a host:port address.
func port(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

// tryCreatePost posts one post and returns its id, or ok false for any
// answer but 201.
func tryCreatePost(addr string, at time.Time) (id int64, ok bool) {
	body := fmt.Sprintf(`{"title":"failover","content":"load","scheduledAt":%q}`, at.UTC().Format(time.RFC3339))
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+addr+"/api/v1/posts", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var p struct{ ID int64 }
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&p) != nil {
		return 0, false
	}
	return p.ID, true
}

// serve and worker on a multi-host URL over a primary and its synchronous
// standby, under write load: kill -9 the primary, promote the standby.
// While no primary answers /readyz names the database check; every post
// the API answered 201 for is on the new primary, published,
// its events on the topic in per-post order; serve, worker and the LISTEN
// connection carry on without a restart, nothing reports a write to a
// read-only server (the old primary, back as a standby, included), and no
// row spent an attempt on the switch. The time
// from the kill to the first event the new primary's relay marked sent is
// printed.
func TestServeAndWorkerCarryOnThroughAPrimaryFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes about a minute")
	}
	dir, p1, p2, multi := startFailoverPair(t)

	b, hookCalls, httpAddr, logs := startFailoverPipeline(t, "fo", "failover-test.log", multi)

	var (
		mu      sync.Mutex
		created []int64
		refused int
	)
	stop := make(chan struct{})
	load := createPostsUntil(httpAddr, stop, func(id int64, ok bool) {
		mu.Lock()
		if ok {
			created = append(created, id)
		} else {
			refused++
		}
		mu.Unlock()
	})
	time.Sleep(3 * time.Second)
	pgFailover(t, "kill-primary", dir)
	killed := time.Now() // every write after this is the new primary's
	// No primary answers: the standby refuses read-write sessions.
	require.Contains(t, postingtest.WaitUnready(t, httpAddr), `"detail":"not ready: check database failed"`)
	time.Sleep(time.Until(killed.Add(time.Second)))
	pgFailover(t, "promote", dir)
	promoted := time.Now()
	require.Eventually(t, func() bool { code, _ := postingtest.HTTPGet(httpAddr, "/readyz"); return code == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "ready again on the new primary")
	// The LISTEN connection found the new primary too.
	requireListening(t, p2)
	time.Sleep(2 * time.Second)
	// The old primary comes back as a standby, first in the URL's host
	// list: read-only, it is never chosen for the pool.
	pgFailover(t, "rejoin", dir)
	time.Sleep(3 * time.Second)
	close(stop)
	load()
	mu.Lock()
	posts := len(created)
	t.Logf("%d posts answered 201, %d requests refused during the switch", posts, refused)
	mu.Unlock()
	require.Greater(t, posts, 0)

	db, err := database.Open(fmt.Sprintf("postgres://postgres@%s/posting?sslmode=disable", p2), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("id IN ? AND status = ?", created, reservation.StatusPublished).Count(&n).Error)
		if n != int64(posts) {
			var st []struct {
				Status string
				N      int64
			}
			_ = db.DB.Model(&reservation.Post{}).Select("status, count(*) AS n").Group("status").Scan(&st).Error
			var ob []struct {
				Status string
				N      int64
			}
			_ = db.DB.Model(&outbox.Message{}).Select("status, count(*) AS n").Group("status").Scan(&ob).Error
			t.Logf("posts %v outbox %v", st, ob)
		}
		return n == int64(posts)
	}, 3*time.Minute, 2*time.Second, "not every post answered 201 was published")
	calls := hookCalls()
	for _, id := range created {
		require.Equal(t, 1, calls[id], "webhook calls for post %d", id)
	}

	var rows []outbox.Message
	require.NoError(t, db.DB.Where("aggregate_id IN ?", created).Find(&rows).Error)
	require.Len(t, rows, 2*posts, "a POSTING_EVENT and a reservation event per post")
	var first time.Time
	for _, r := range rows {
		require.Equal(t, outbox.StatusSent, r.Status, "row %d", r.ID)
		require.Zero(t, r.RetryCount, "row %d spent an attempt on the switch", r.ID)
		if r.SentAt != nil && r.SentAt.After(killed) && (first.IsZero() || r.SentAt.Before(first)) {
			first = *r.SentAt
		}
	}
	require.False(t, first.IsZero(), "the new primary's relay sent nothing")
	t.Logf("kill -9 of the primary to the first event marked sent by the new primary: %s (promoted %s after the kill; first send %s after the promotion)",
		first.Sub(killed).Round(time.Millisecond), promoted.Sub(killed).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond))

	requireEventsInOrder(t, b, created)
	old, err := database.Open(fmt.Sprintf("postgres://postgres@%s/posting?sslmode=disable", p1), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = old.Close() })
	var recovering bool
	require.NoError(t, old.Raw("SELECT pg_is_in_recovery()").Scan(&recovering).Error)
	require.True(t, recovering, "the old primary is back as a standby")
	require.NotContains(t, logs.String(), "read-only transaction")
	require.NotContains(t, logs.String(), "SQLSTATE 25006") // not a bare 25006: a duration may hold it
}

// startFailoverPipeline starts serve (serveArgs added) and a worker, their
// instance ids starting with prefix, on the failover pair's multi-host URL
// with an in-process broker, the worker publishing to a counting webhook.
// It returns the broker, the webhook's calls, serve's address once ready and
// the processes' log, written to logName in the temporary folder if the
// test fails.
func startFailoverPipeline(t *testing.T, prefix, logName, multi string, serveArgs ...string) (
	b *kafkatest.Broker, hookCalls func() map[int64]int, httpAddr string, logs *logtest.Buffer) {
	t.Helper()
	b = kafkatest.Start(t)
	hook, hookCalls := countingWebhook(t)
	logs = &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			_ = os.WriteFile(filepath.Join(os.TempDir(), logName), []byte(logs.String()), 0o644)
		}
	})
	httpAddr = postingtest.FreeAddr(t)
	common := []string{"--database-url", multi, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir()}
	serve := append([]string{"serve", "--http-addr", httpAddr, "--instance-id", prefix + "-serve",
		"--scheduler-spec", "@every 1s", "--reservation-lead", "3s", "--relay-interval", "200ms",
		"--api-write-rate", "off"}, serveArgs...)
	run(t, logs, append(serve, common...)...)
	require.Eventually(t, func() bool { code, _ := postingtest.HTTPGet(httpAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "serve never became ready")
	run(t, logs, append([]string{"worker", "--instance-id", prefix + "-worker", "--worker-http-addr", "",
		"--publish-webhook-url", hook.URL}, common...)...)
	return b, hookCalls, httpAddr, logs
}

// createPostsUntil creates posts due 4 s ahead through serve at httpAddr
// from two clients, one every 20 ms each, until stop is closed, telling
// answered of each (the post's id and whether it was a 201). The returned
// function waits for the clients to finish.
func createPostsUntil(httpAddr string, stop <-chan struct{}, answered func(id int64, ok bool)) func() {
	var load sync.WaitGroup
	for range 2 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, ok := tryCreatePost(httpAddr, time.Now().Add(4*time.Second))
				answered(id, ok)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return load.Wait
}

// requireEventsInOrder reads the two events of each post of ids from b and
// requires each post's POSTING_EVENT before its reservation event (a
// redelivered event counted once).
func requireEventsInOrder(t *testing.T, b *kafkatest.Broker, ids []int64) {
	t.Helper()
	records := b.Records(t, 2*len(ids), 30*time.Second)
	seen := map[string][]string{}
	for _, r := range records {
		if !strings.Contains(strings.Join(seen[r.Key], ","), r.Headers["event-id"]) {
			seen[r.Key] = append(seen[r.Key], r.Headers["event-type"], r.Headers["event-id"])
		}
	}
	for _, id := range ids {
		got := seen[fmt.Sprint(id)]
		require.Len(t, got, 4, "post %d: %v", id, got)
		require.Equal(t, []string{string(event.PostingEvent), string(event.ReservationEvent)}, []string{got[0], got[2]}, "post %d in order", id)
	}
}

// requireListening waits until a session of the posting database on the
// server at addr has run LISTEN as its last statement: serve's listener
// (which then stays silent until its connection check).
func requireListening(t *testing.T, addr string) {
	t.Helper()
	db, err := database.Open(fmt.Sprintf("postgres://postgres@%s/posting?sslmode=disable", addr), "")
	require.NoError(t, err)
	defer db.Close()
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.Raw("SELECT count(*) FROM pg_stat_activity WHERE datname = 'posting' AND query LIKE 'LISTEN %'").Scan(&n).Error)
		return n > 0
	}, 30*time.Second, 100*time.Millisecond, "no session LISTENs on %s", addr)
}

// A standby promoted while the old primary still runs and takes
// connections, before anything fences it (split brain): serve and worker
// stay on the first host of the URL that accepts writes, the old primary,
// whose commits now wait for a synchronous standby that is gone, so the API
// answers 201 for no post that is only there and no relay sends from it;
// once the old primary is stopped, as a failover manager fences it, serve,
// worker and the LISTEN connection carry on on the new primary without a
// restart, and every post answered 201 is there, published, its events on
// the topic in per-post order.
func TestServeAndWorkerThroughASplitBrainAnswer201OnlyForPostsOnTheNewPrimary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes about two minutes")
	}
	dir, _, p2, multi := startFailoverPair(t)
	// The default stale limit (2 minutes): rows a relay claimed on the old
	// primary before the split and sent have their acknowledgements kept and
	// written on the new primary, and a claim that got no answer is read
	// back there, so nothing waits for stale recovery.
	b, hookCalls, httpAddr, logs := startFailoverPipeline(t, "sb", "splitbrain-test.log", multi)

	type answer struct {
		id int64
		at time.Time
	}
	var (
		mu      sync.Mutex
		created []answer
	)
	stop := make(chan struct{})
	load := createPostsUntil(httpAddr, stop, func(id int64, ok bool) {
		if ok {
			mu.Lock()
			created = append(created, answer{id, time.Now()})
			mu.Unlock()
		}
	})
	time.Sleep(3 * time.Second)
	pgFailover(t, "promote", dir) // the old primary runs on
	promoted := time.Now()
	time.Sleep(5 * time.Second)
	pgFailover(t, "kill-primary", dir) // fenced
	fenced := time.Now()
	require.Eventually(t, func() bool { code, _ := postingtest.HTTPGet(httpAddr, "/readyz"); return code == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "ready again on the new primary")
	requireListening(t, p2)
	time.Sleep(3 * time.Second)
	close(stop)
	load()

	mu.Lock()
	var ids []int64
	during := 0
	for _, a := range created {
		ids = append(ids, a.id)
		if a.at.After(promoted) && a.at.Before(fenced) {
			during++
		}
	}
	mu.Unlock()
	t.Logf("%d posts answered 201, %d of them between the promotion and the fence", len(ids), during)
	require.NotEmpty(t, ids)

	db, err := database.Open(fmt.Sprintf("postgres://postgres@%s/posting?sslmode=disable", p2), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var onNew int64
	require.NoError(t, db.DB.Model(&reservation.Post{}).Where("id IN ?", ids).Count(&onNew).Error)
	require.Equal(t, int64(len(ids)), onNew, "posts answered 201 missing on the new primary")
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("id IN ? AND status = ?", ids, reservation.StatusPublished).Count(&n).Error)
		return n == int64(len(ids))
	}, 3*time.Minute, 2*time.Second, "not every post answered 201 was published")
	calls := hookCalls()
	for _, id := range ids {
		require.GreaterOrEqual(t, calls[id], 1, "webhook calls for post %d", id)
	}
	requireEventsInOrder(t, b, ids)
	require.NotContains(t, logs.String(), "read-only transaction")
	var rows []outbox.Message
	require.NoError(t, db.DB.Where("aggregate_id IN ?", ids).Find(&rows).Error)
	for _, r := range rows {
		require.Equal(t, outbox.StatusSent, r.Status, "row %d", r.ID)
		require.Zero(t, r.RetryCount, "row %d spent an attempt on the switch", r.ID)
	}
}

// posting migrate waiting for the migration lock on a primary that dies
// (kill -9) exits with an error naming the lock instead of waiting on, and
// run again after the standby's promotion it migrates the new primary.
func TestMigrateWaitingForItsLockThroughAPrimaryFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes two PostgreSQL clusters")
	}
	dir, p1, p2, multi := startFailoverPair(t)
	bin, err := postingtest.Binary()
	require.NoError(t, err)

	// Another process holds the migration lock ("posting" in ASCII).
	holder, err := database.Open(fmt.Sprintf("postgres://postgres@%s/posting?sslmode=disable", p1), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	tx := holder.DB.Begin()
	require.NoError(t, tx.Error)
	require.NoError(t, tx.Exec("SELECT pg_advisory_xact_lock(?)", int64(0x706f7374696e67)).Error)

	var out strings.Builder
	cmd := exec.Command(bin, "migrate", "--database-url", multi)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	require.Eventually(t, func() bool {
		var waiting int64
		require.NoError(t, holder.DB.Raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&waiting).Error)
		return waiting == 1
	}, 30*time.Second, 50*time.Millisecond, "migrate never waited for the lock")

	pgFailover(t, "kill-primary", dir)
	pgFailover(t, "promote", dir)
	select {
	case err := <-exited:
		require.Error(t, err, "migrate exited 0 without its lock: %s", out.String())
		require.Contains(t, out.String(), "migration lock", out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("migrate still waits a minute after its server died: %s", out.String())
	}

	again, err := exec.Command(bin, "migrate", "--database-url", multi).CombinedOutput()
	require.NoError(t, err, "%s", again)
	db, err := database.Open(fmt.Sprintf("postgres://postgres@%s/posting?sslmode=disable", p2), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var table *string
	require.NoError(t, db.DB.Raw("SELECT to_regclass('outbox')::text").Scan(&table).Error)
	require.NotNil(t, table, "no outbox table on the new primary")
}
