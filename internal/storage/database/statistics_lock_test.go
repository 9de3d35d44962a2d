package database_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// RefreshStatistics on PostgreSQL does not queue for a table whose lock
// another VACUUM or ANALYZE holds (here a session's LOCK of the same mode):
// it passes the table over at once, never waiting. A waiter would, after
// deadlock_timeout, make PostgreSQL cancel an autovacuum holding the lock,
// and, queued, would hold up the DDL that queues behind it.
func TestRefreshStatisticsPassesOverAHeldTableWithoutWaiting(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.PostgreSQL)
	require.NoError(t, db.Exec("ALTER TABLE posts SET (autovacuum_enabled = false)").Error)
	require.NoError(t, db.Exec(`INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at)
		SELECT 'p', 'p', 'RESERVED', now(), now(), now() FROM generate_series(1, 2000)`).Error)
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.Raw("SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = 'posts' AND schemaname = current_schema()").Row().Scan(&n))
		return n >= database.StaleRows
	}, 30*time.Second, 10*time.Millisecond, "the inserts reach the statistics")

	holder := db.Begin()
	require.NoError(t, holder.Error)
	defer holder.Rollback()
	require.NoError(t, holder.Exec("LOCK TABLE posts IN SHARE UPDATE EXCLUSIVE MODE").Error)

	type answer struct {
		analyzed []string
		err      error
	}
	done := make(chan answer, 1)
	go func() {
		analyzed, err := db.Driver().RefreshStatistics(db.DB, "posts")
		done <- answer{analyzed, err}
	}()
	waited := false
	var got answer
	for running := true; running; {
		select {
		case got = <-done:
			running = false
		default:
			var n int
			require.NoError(t, db.Raw(`SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n).Error)
			waited = waited || n > 0
			time.Sleep(time.Millisecond)
		}
	}
	require.NoError(t, got.err)
	require.Empty(t, got.analyzed)
	require.False(t, waited, "RefreshStatistics queued for the lock of posts")

	require.NoError(t, holder.Rollback().Error)
	analyzed, err := db.Driver().RefreshStatistics(db.DB, "posts")
	require.NoError(t, err)
	require.Equal(t, []string{"posts"}, analyzed, "once free, the table is analyzed")
}
