package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// On PostgreSQL, serve and worker each analyze a table of the service once a
// bulk write changed much of it (POSTING_DATABASE_STATISTICS_INTERVAL),
// long before autovacuum's next look; with the interval 0 serve leaves the
// table to autovacuum.
func TestServeAndWorkerAnalyzePostsAfterABulkWriteOnPostgres(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd, interval string
		analyzes      bool
	}{{"serve", "1s", true}, {"serve", "0", false}, {"worker", "1s", true}} {
		t.Run(tc.cmd+" interval "+tc.interval, func(t *testing.T) {
			t.Parallel()
			dbURL := databasetest.URL(t, database.PostgreSQL, "statistics")
			env := []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_DATABASE_STATISTICS_INTERVAL=" + tc.interval}
			var p *postingtest.Proc
			if tc.cmd == "serve" {
				p = postingtest.StartFreshServe(t, append(env, "POSTING_EMBEDDED_KAFKA_ADDR="+freeAddr(t))...)
			} else {
				amqpURL := rabbitmqtest.URL(t)
				exchange, group := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
				rabbitmqtest.DeleteAfter(t, amqpURL, exchange, group)
				p = postingtest.StartFreshWorker(t, append(env, "POSTING_RABBITMQ_URL="+amqpURL,
					"POSTING_RABBITMQ_EXCHANGE="+exchange, "POSTING_WORKER_GROUP="+group)...)
			}
			db, err := database.Open(dbURL, "")
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			require.NoError(t, db.Exec("ALTER TABLE posts SET (autovacuum_enabled = false)").Error)
			require.NoError(t, db.Exec(`INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at)
				SELECT 'bulk', 'bulk', 'RESERVED', now() + interval '1 day', now(), now() FROM generate_series(1, 3000)`).Error)
			analyzed := func() bool {
				var n int64
				require.NoError(t, db.Raw("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'posts'").Row().Scan(&n))
				return n > 0
			}
			if !tc.analyzes {
				time.Sleep(5 * time.Second)
				require.False(t, analyzed(), "posts analyzed with the keeper off")
				require.NotContains(t, p.Out.String(), "statistics refreshed")
				return
			}
			require.Eventually(t, analyzed, 30*time.Second, 100*time.Millisecond, "%s has not analyzed posts", tc.cmd)
			require.Eventually(t, func() bool {
				return strings.Contains(p.Out.String(), "planner's statistics refreshed") && strings.Contains(p.Out.String(), "posts")
			}, 10*time.Second, 50*time.Millisecond)
		})
	}
}
