package database_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// After most posts turned WORKING at once (a spike marked for publishing),
// PostgreSQL's statistics still say WORKING is rare, and an UPDATE of a few
// posts by id and status reads every WORKING post through a status index.
// The keeper analyzes posts within its interval, and the same UPDATE then
// finds its posts by id.
func TestStatisticsKeeperBringsUpdatesByIdBackToTheirKeysAfterABulkChange(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.PostgreSQL)
	// Autovacuum would otherwise be free to analyze posts first.
	require.NoError(t, db.Exec("ALTER TABLE posts SET (autovacuum_enabled = false)").Error)
	require.NoError(t, db.Exec(`INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at)
		SELECT 'spike', 'spike', 'RESERVED', now(), now(), now() FROM generate_series(1, 50000)`).Error)
	require.NoError(t, db.Driver().Settle(db.DB, "posts"))
	require.NoError(t, db.Exec("UPDATE posts SET status = 'WORKING' WHERE id <= 40000").Error)

	ids := []int64{100, 2000, 7000, 15000, 39000}
	plan := func() string {
		rows, err := db.Raw("EXPLAIN UPDATE posts SET updated_at = updated_at WHERE id IN ? AND status = ?", ids, "WORKING").Rows()
		require.NoError(t, err)
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			lines = append(lines, line)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	idCond := func(p string) bool {
		for line := range strings.SplitSeq(p, "\n") {
			if strings.Contains(line, "Index Cond") && strings.Contains(line, "id = ANY") {
				return true
			}
		}
		return false
	}
	require.False(t, idCond(plan()), "with statistics of all posts RESERVED, the plan this test is about does not show:\n%s", plan())

	analyzed := func() int64 {
		var n int64
		require.NoError(t, db.Raw("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'posts'").Row().Scan(&n))
		return n
	}
	before := analyzed()
	var logs logtest.Buffer
	keeper, err := database.NewStatisticsKeeper(db, time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.NoError(t, keeper.Start(context.Background()))
	t.Cleanup(keeper.Stop)
	// The keeper logs after its ANALYZE has committed. pg_stat_user_tables
	// counts the ANALYZE before then, so a plan read on that count alone
	// may still see the old statistics.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "planner's statistics refreshed") }, 30*time.Second, 50*time.Millisecond,
		"the keeper has not analyzed posts")
	require.Contains(t, logs.String(), "tables=[posts]")
	require.Greater(t, analyzed(), before)
	p := plan()
	require.True(t, idCond(p), "the posts are not found by id:\n%s", p)
}

// The keeper takes no interval below a second.
func TestStatisticsKeeperRefusesAnIntervalBelowASecond(t *testing.T) {
	_, err := database.NewStatisticsKeeper(databasetest.NewSQLite(t), 999*time.Millisecond, slog.Default())
	require.ErrorContains(t, err, "below 1s")
}
