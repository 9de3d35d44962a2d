package spike_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/operate/bench/spike"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// TestRunPublishesEveryPostNoneEarly runs a small spike through the
// scheduler, relay and worker on each database: every post is published,
// and none before its time by the database's clock.
func TestRunPublishesEveryPostNoneEarly(t *testing.T) {
	runPublishesEveryPostNoneEarly(t, "")
}

// The same through RabbitMQ: the worker's queue, its batches and multiple
// acks.
func TestRunThroughRabbitMQPublishesEveryPostNoneEarly(t *testing.T) {
	runPublishesEveryPostNoneEarly(t, rabbitmqtest.URL(t))
}

func runPublishesEveryPostNoneEarly(t *testing.T, rabbitMQURL string) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		res, err := spike.Run(context.Background(), db.DB, spike.Config{Posts: 300, DueIn: 3 * time.Second,
			SchedulerSpec: "@every 1s", RelayInterval: 100 * time.Millisecond, Timeout: 2 * time.Minute, RabbitMQURL: rabbitMQURL})
		require.NoError(t, err)
		require.Equal(t, 300, res.Posts)
		require.GreaterOrEqual(t, res.Min, time.Duration(0), "a post was published before its time: %s", res)
		var unpublished int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM posts WHERE status <> 'PUBLISHED' OR published_at IS NULL").Scan(&unpublished).Error)
		require.Zero(t, unpublished)
		var pubs int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM publications WHERE status = 'PUBLISHED'").Scan(&pubs).Error)
		require.EqualValues(t, 300, pubs)
		if db.Dialect == database.PostgreSQL {
			var analyzed bool
			require.NoError(t, db.Raw("SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'posts'").Row().Scan(&analyzed))
			require.True(t, analyzed, "the seeded posts were not analyzed before the spike")
		}
		t.Log(res)
	})
}

func TestRunRefusesADatabaseWithPosts(t *testing.T) {
	db := databasetest.NewSQLite(t)
	require.NoError(t, db.Exec("INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at, version) VALUES ('t','c','RESERVED',CURRENT_TIMESTAMP,CURRENT_TIMESTAMP,CURRENT_TIMESTAMP,1)").Error)
	_, err := spike.Run(context.Background(), db.DB, spike.Config{Posts: 10})
	require.ErrorIs(t, err, spike.ErrNotEmpty)
}

var (
	spikePosts    = flag.Int("spike.posts", 20000, "posts due in the same second in BenchmarkSpike")
	spikeDueIn    = flag.Duration("spike.due-in", 30*time.Second, "how long after they are seeded the posts are due in BenchmarkSpike")
	spikeWorkers  = flag.Int("spike.concurrency", worker.DefaultConcurrency, "the worker's concurrency in BenchmarkSpike")
	spikeRabbitMQ = flag.Bool("spike.rabbitmq", false, "BenchmarkSpike through RabbitMQ (POSTING_TEST_RABBITMQ_URL or the local broker) instead of the in-process Kafka broker")
)

// BenchmarkSpike measures the publication lag of spike.Posts posts due in the
// same second, on each database, with the service's settings (scheduler
// every 5 s, relay batch 100 every 5 s, worker concurrency 64 unless
// -spike.concurrency says otherwise). Run with
// -benchtime 1x.
func BenchmarkSpike(b *testing.B) {
	for _, d := range databasetest.Dialects {
		b.Run(string(d), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				db := databasetest.New(b, d)
				b.StartTimer()
				cfg := spike.Config{Posts: *spikePosts, DueIn: *spikeDueIn, Timeout: *spikeDueIn + 5*time.Minute, Concurrency: *spikeWorkers}
				if *spikeRabbitMQ {
					cfg.RabbitMQURL = rabbitmqtest.URL(b)
				}
				res, err := spike.Run(context.Background(), db.DB, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.P50.Seconds(), "p50_s")
				b.ReportMetric(res.P99.Seconds(), "p99_s")
				b.ReportMetric(res.Max.Seconds(), "max_s")
				b.ReportMetric(res.AllWorking.Seconds(), "all_working_s")
				b.ReportMetric(res.AllRecorded.Seconds(), "all_recorded_s")
				b.Log(res)
			}
		})
	}
}

// Floor writes a PUBLISHED publication and status for every post it seeds,
// across more than one transaction, and refuses a database with posts.
func TestFloorPublishesEveryPostInBulk(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		took, err := spike.Floor(context.Background(), db.DB, 2500)
		require.NoError(t, err)
		require.Positive(t, took)
		var posts, published, publications int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM posts").Scan(&posts).Error)
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM posts WHERE status = 'PUBLISHED' AND published_at IS NOT NULL").Scan(&published).Error)
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM publications p JOIN posts ON posts.id = p.post_id WHERE p.status = 'PUBLISHED'").Scan(&publications).Error)
		require.EqualValues(t, 2500, posts)
		require.EqualValues(t, 2500, published)
		require.EqualValues(t, 2500, publications)
		_, err = spike.Floor(context.Background(), db.DB, 10)
		require.ErrorIs(t, err, spike.ErrNotEmpty)
	})
}

// Posts that come due while their seeding settles (here PostgreSQL's
// VACUUM waits for a lock another session holds past their time) would
// count the seeding in their lag: Run refuses them, naming the setting.
func TestRunRefusesPostsThatCameDueWhileSeeding(t *testing.T) {
	t.Parallel()
	url := databasetest.URL(t, database.PostgreSQL, "spikedue")
	db := databasetest.Open(t, url)
	databasetest.Migrate(t, db)
	holder := databasetest.Open(t, url)
	// The lock VACUUM takes, held until 3 s after the posts' time.
	tx := holder.Begin()
	require.NoError(t, tx.Exec("LOCK TABLE posts IN SHARE UPDATE EXCLUSIVE MODE").Error)
	release := time.AfterFunc(4*time.Second, func() { tx.Rollback() })
	t.Cleanup(func() {
		if release.Stop() {
			tx.Rollback()
		}
	})
	_, err := spike.Run(context.Background(), db.DB, spike.Config{Posts: 100, DueIn: time.Second})
	require.ErrorIs(t, err, spike.ErrDueTooSoon)
	require.ErrorContains(t, err, "--spike-due-in")
}

// A transaction left open elsewhere on a MySQL server holds InnoDB's purge
// back for as long as it stays open. Settling the seeded posts does not
// wait it out, so they come due after they are settled and the spike runs.
// Not parallel: the snapshot holds purge back on the whole server, and the
// spikes of the tests beside it would settle against it too.
func TestRunOnMySQLDoesNotWaitOutATransactionOpenElsewhere(t *testing.T) {
	url := databasetest.MySQLURL(t, "spikeheld")
	db := databasetest.Open(t, url)
	databasetest.Migrate(t, db)
	ctx := context.Background()
	holder := databasetest.HoldSnapshot(t, databasetest.Open(t, url))

	res, err := spike.Run(ctx, db.DB, spike.Config{Posts: 100, DueIn: 3 * time.Second,
		SchedulerSpec: "@every 1s", RelayInterval: 100 * time.Millisecond, Timeout: 2 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, 100, res.Posts)
	var seen int64
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT COUNT(*) FROM posts").Scan(&seen))
	require.Zero(t, seen, "the transaction held open elsewhere ended during the spike: it reads the seeded posts")
}
