package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/migrations"
)

// A statement_timeout on the service's URL (options=-c statement_timeout=…,
// a common guard in production) bounds queries, not the wait for the
// migration lock: a process that starts while another one migrates waits
// for it as on MySQL and SQLite, up to the lock wait, instead of failing
// with "canceling statement due to statement timeout" once the timeout
// passes.
func TestPostgresMigrationLockWaitOutlastsStatementTimeout(t *testing.T) {
	t.Parallel()
	url := freshURL(t, database.PostgreSQL)
	holder, err := database.Open(url, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Close() })
	sqlHolder, err := holder.DB.DB()
	require.NoError(t, err)
	ctx := context.Background()
	conn, err := sqlHolder.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", migrations.PostgresLockKey)
	require.NoError(t, err)

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := database.Open(url+sep+"options=-c%20statement_timeout%3D200", "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var st string
	require.NoError(t, db.Raw("SHOW statement_timeout").Scan(&st).Error)
	require.Equal(t, "200ms", st, "the URL's statement_timeout is in force")
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := migrations.UpWithLockWait(ctx, sqlDB, database.PostgreSQL, nil, time.Minute)
		done <- result{n, err}
	}()
	// Release the lock once the other process has waited for it well past
	// its statement_timeout.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int64
		require.NoError(t, holder.Raw(`SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'
  AND clock_timestamp() - query_start > interval '1 second'`).Scan(&waiting).Error)
		if waiting > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("Up ended while the lock was held: n=%d err=%v", r.n, r.err)
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no process waited for the migration lock")
	}
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", migrations.PostgresLockKey)
	require.NoError(t, err)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, migrationCount(t, database.PostgreSQL), r.n)
	case <-time.After(30 * time.Second):
		t.Fatal("Up did not end after the lock was released")
	}
	require.NoError(t, db.Raw("SHOW statement_timeout").Scan(&st).Error)
	require.Equal(t, "200ms", st, "the pool's sessions keep the URL's statement_timeout")
}
