package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// SQLite rebuilds posts and publications in 00011 (and back in its Down):
// the rows keep their ids and statuses, the indexes are there again, and
// the AUTOINCREMENT counter goes on from the highest id ever handed out,
// also when the last posts were deleted before, so no id is reused.
func TestSQLitePostsRebuildKeepsRowsAndNeverReusesAnID(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	ctx := context.Background()
	p, err := goose.NewProvider(goose.DialectSQLite3, sqlDB, os.DirFS("sqlite"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 10)
	require.NoError(t, err)

	insert := func() int64 {
		t.Helper()
		res, err := sqlDB.Exec("INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at) " +
			"VALUES ('t', 'c', 'WORKING', '2030-01-01 00:00:00+00:00', '2030-01-01 00:00:00+00:00', '2030-01-01 00:00:00+00:00')")
		require.NoError(t, err)
		id, err := res.LastInsertId()
		require.NoError(t, err)
		return id
	}
	first, second, third := insert(), insert(), insert()
	_, err = sqlDB.Exec("INSERT INTO publications (post_id, event_id, partition_id, scheduled_at, status, created_at, updated_at) "+
		"VALUES (?, 'e', 0, '2030-01-01 00:00:00+00:00', 'FAILED', '2030-01-01 00:00:00+00:00', '2030-01-01 00:00:00+00:00')", second)
	require.NoError(t, err)
	_, err = sqlDB.Exec("DELETE FROM posts WHERE id = ?", third)
	require.NoError(t, err)

	_, err = p.UpTo(ctx, 11)
	require.NoError(t, err)
	var ids []int64
	rows, err := sqlDB.Query("SELECT id FROM posts ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{first, second}, ids, "the rows keep their ids")
	var st string
	require.NoError(t, sqlDB.QueryRow("SELECT status FROM publications WHERE post_id = ?", second).Scan(&st))
	require.Equal(t, "FAILED", st)
	for _, idx := range []string{"idx_posts_status_scheduled_at_id", "idx_posts_status_id", "idx_posts_owner_id",
		"idx_posts_owner_status_id", "idx_posts_status_publish_by"} {
		require.True(t, db.Migrator().HasIndex("posts", idx), "index %s", idx)
	}
	require.True(t, db.Migrator().HasIndex("publications", "idx_publications_status_partition"))
	fourth := insert()
	require.Greater(t, fourth, third, "an id handed out before is not handed out again")

	_, err = sqlDB.Exec("DELETE FROM posts WHERE id = ?", fourth)
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 10)
	require.NoError(t, err)
	require.Greater(t, insert(), fourth, "nor after the Down")
	_, err = p.Up(ctx)
	require.NoError(t, err)
}
