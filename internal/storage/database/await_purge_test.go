package database_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// On MySQL, AwaitPurge returns once InnoDB has purged the rows deleted
// before it: while a snapshot taken before the delete keeps them from purge
// it waits (a second here, within the stall it tolerates), and it returns
// once that snapshot ends.
func TestAwaitPurgeWaitsForThePurgeOfDeletedRows(t *testing.T) {
	t.Parallel()
	db := databasetest.NewMySQL(t)
	rows := strings.Repeat("('purge', 'purge', 'RESERVED', NOW(6), NOW(6), NOW(6)),", 1999) + "('purge', 'purge', 'RESERVED', NOW(6), NOW(6), NOW(6))"
	require.NoError(t, db.Exec("INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at) VALUES "+rows).Error)

	ctx := context.Background()
	reader := databasetest.HoldSnapshot(t, db)
	require.NoError(t, db.Exec("DELETE FROM posts").Error)

	settled := make(chan error, 1)
	go func() { settled <- db.Driver().AwaitPurge(db.WithContext(ctx)) }()
	select {
	case err := <-settled:
		t.Fatalf("AwaitPurge returned (%v) while a snapshot kept the deleted posts from purge", err)
	case <-time.After(time.Second):
	}
	var seen int64
	require.NoError(t, reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM posts").Scan(&seen))
	require.EqualValues(t, 2000, seen, "the snapshot reads the posts as they were before the delete")
	_, err := reader.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	select {
	case err := <-settled:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("AwaitPurge has not returned after the snapshot ended")
	}
}
