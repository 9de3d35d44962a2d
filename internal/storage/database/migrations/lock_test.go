package migrations_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
)

// freshURL returns the URL of a fresh, empty database of the dialect.
func freshURL(t *testing.T, d database.Dialect) string {
	t.Helper()
	return databasetest.URL(t, d, "migrate")
}

func migrationCount(t *testing.T, d database.Dialect) int {
	t.Helper()
	files, err := filepath.Glob(string(d) + "/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return len(files)
}

// Several pools racing Up on one fresh database: every Up succeeds, the
// migrations are applied once in all (the others find nothing to do), and
// the schema is whole. Without the lock they create the same tables and
// fail ("already exists", "missing zero version migration", "duplicate
// column").
func TestUpRacingPools(t *testing.T) {
	t.Parallel()
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			for round := range 3 {
				url := freshURL(t, d)
				const racers = 4
				dbs := make([]*database.DB, racers)
				for i := range dbs {
					db := databasetest.Open(t, url)
					dbs[i] = db
				}
				var wg sync.WaitGroup
				applied := make([]int, racers)
				errs := make([]error, racers)
				start := make(chan struct{})
				for i, db := range dbs {
					wg.Go(func() {
						<-start
						applied[i], errs[i] = migrations.Apply(context.Background(), db, nil)
					})
				}
				close(start)
				wg.Wait()
				total := 0
				for i := range racers {
					require.NoError(t, errs[i], "round %d, racer %d", round, i)
					total += applied[i]
				}
				require.Equal(t, migrationCount(t, d), total, "round %d: each migration applied once", round)
				require.True(t, dbs[0].Migrator().HasColumn("outbox", "unsent_aggregate_id"), "the last migration's column")
				var versions int
				require.NoError(t, dbs[0].Raw("SELECT COUNT(*) FROM goose_db_version WHERE version_id > 0").Scan(&versions).Error)
				require.Equal(t, total, versions, "one version row per migration")
			}
		})
	}
}

// lockRivals opens a fresh database of the dialect twice: the pool that
// migrates, and one session of a second pool that takes the migration lock
// first, as another process would.
func lockRivals(t *testing.T, d database.Dialect) (*database.DB, *sql.DB, *sql.Conn) {
	t.Helper()
	url := freshURL(t, d)
	db := databasetest.Open(t, url)
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)

	other := databasetest.Open(t, url)
	otherDB, err := other.DB.DB()
	require.NoError(t, err)
	conn, err := otherDB.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return db, sqlDB, conn
}

// While another session holds the MySQL migration lock, Up waits for it and
// gives up with ErrLockTimeout naming the lock; once it is released, Up runs.
func TestUpWaitsForTheMySQLLock(t *testing.T) {
	t.Parallel()
	db, sqlDB, conn := lockRivals(t, database.MySQL)
	var schema string
	require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT DATABASE()").Scan(&schema))
	name := migrations.MySQLLockName(schema)
	require.True(t, strings.HasPrefix(name, "posting_migrate:"), name)
	var got int
	require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, 0)", name).Scan(&got))
	require.Equal(t, 1, got)

	_, err := migrations.UpWithLockWait(context.Background(), sqlDB, database.MySQL, nil, time.Second)
	require.ErrorIs(t, err, migrations.ErrLockTimeout)
	require.ErrorContains(t, err, name)
	require.False(t, db.Migrator().HasTable("posts"), "nothing applied without the lock")

	require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT RELEASE_LOCK(?)", name).Scan(&got))
	n, err := migrations.UpWithLockWait(context.Background(), sqlDB, database.MySQL, nil, time.Second)
	require.NoError(t, err)
	require.Equal(t, migrationCount(t, database.MySQL), n)

	// Up released the lock: another session takes it at once.
	var free sql.NullInt64
	require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT IS_FREE_LOCK(?)", name).Scan(&free))
	require.Equal(t, int64(1), free.Int64, "the lock is free after Up")
}

// While another session holds the PostgreSQL migration lock, Up waits for it
// and gives up with ErrLockTimeout naming the lock; once it is released, Up
// runs, and releases it in turn.
func TestUpWaitsForThePostgresLock(t *testing.T) {
	t.Parallel()
	db, sqlDB, conn := lockRivals(t, database.PostgreSQL)
	_, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_lock($1)", migrations.PostgresLockKey)
	require.NoError(t, err)

	_, err = migrations.UpWithLockWait(context.Background(), sqlDB, database.PostgreSQL, nil, time.Second)
	require.ErrorIs(t, err, migrations.ErrLockTimeout)
	require.ErrorContains(t, err, "pg_advisory_xact_lock")
	require.False(t, db.Migrator().HasTable("posts"), "nothing applied without the lock")

	released := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", migrations.PostgresLockKey)
		released <- err
	}()
	n, err := migrations.UpWithLockWait(context.Background(), sqlDB, database.PostgreSQL, nil, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, <-released)
	require.Equal(t, migrationCount(t, database.PostgreSQL), n)

	// Up released the lock: another session takes it at once.
	var got bool
	require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT pg_try_advisory_lock($1)", migrations.PostgresLockKey).Scan(&got))
	require.True(t, got, "the lock is free after Up")
}

// A statement_timeout on the service's URL (options=-c statement_timeout=…,
// a common guard in production) bounds queries, not the wait for the
// migration lock: a process that starts while another one migrates waits
// for it as on MySQL and SQLite, up to the lock wait, instead of failing
// with "canceling statement due to statement timeout" once the timeout
// passes.
func TestPostgresMigrationLockWaitOutlastsStatementTimeout(t *testing.T) {
	t.Parallel()
	url := freshURL(t, database.PostgreSQL)
	holder := databasetest.Open(t, url)
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
	db := databasetest.Open(t, url+sep+"options=-c%20statement_timeout%3D200")
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
