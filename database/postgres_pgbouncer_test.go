package database_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/database/pgbouncertest"
	"github.com/postingsvc/posting/migrations"
)

// Through PgBouncer in transaction pooling, where consecutive statements of
// one client run on different server connections, the pool migrates
// (taking and releasing the migration lock) and runs concurrent statements
// with arguments without a prepared-statement error, and leaves no advisory
// lock behind on any server connection.
//
// Session pooling, which hands a client one server connection for its
// whole session, works the same.
func TestPostgresPoolThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgbouncertest.Mode{pgbouncertest.Transaction, pgbouncertest.Session} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			poolThroughPgBouncer(t, mode)
		})
	}
}

func poolThroughPgBouncer(t *testing.T, mode pgbouncertest.Mode) {
	direct := databasetest.PostgresURL(t, "")
	pooled := pgbouncertest.Start(t, direct, mode)
	db := databasetest.Open(t, pooled)
	ctx := context.Background()
	_, err := migrations.Apply(ctx, db, nil)
	require.NoError(t, err)

	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				key := fmt.Sprintf("k-%d-%d", w, r)
				if err := db.Exec("INSERT INTO inbox (event_id, consumer, event_type, processed_at) VALUES (?, ?, ?, clock_timestamp())", key, "pgbouncer", "post.created").Error; err != nil {
					errs <- err
					continue
				}
				var n int64
				if err := db.Raw("SELECT count(*) FROM inbox WHERE event_id = ? AND consumer = ?", key, "pgbouncer").Scan(&n).Error; err != nil {
					errs <- err
				} else if n != 1 {
					errs <- fmt.Errorf("%s: %d rows", key, n)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var rows int64
	require.NoError(t, db.Raw("SELECT count(*) FROM inbox").Scan(&rows).Error)
	require.EqualValues(t, workers*rounds, rows)

	check := databasetest.Open(t, direct)
	var locks int64
	require.NoError(t, check.Raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&locks).Error)
	require.Zero(t, locks, "an advisory lock left on a server connection")
}

// A statement cut off by its context while PgBouncer (transaction pooling,
// one server session) runs it, or as it ends, leaves the next statements on
// the pool their own results: pgx closes the connection and sends a cancel
// request through the pooler, whose answer must not reach them.
func TestPostgresStatementCancelledThroughPgBouncerLeavesTheNextTheirResults(t *testing.T) {
	t.Parallel()
	direct := databasetest.PostgresURL(t, "")
	db := databasetest.Open(t, pgbouncertest.StartWithPoolSize(t, direct, pgbouncertest.Transaction, 1))
	cut := 0
	for i := range 40 {
		// Sleeps from 0 to 39 ms against a 20 ms deadline: cancels while the
		// statement runs, as it ends, and after.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := db.WithContext(ctx).Exec("SELECT pg_sleep(?::float8 / 1000)", i).Error
		cancel()
		if err != nil {
			cut++
		}
		for j := range 3 {
			want := int64(i*10 + j)
			var got int64
			require.NoError(t, db.Raw("SELECT ?::bigint", want).Scan(&got).Error, "statement %d after sleep %d ms", j, i)
			require.Equal(t, want, got, "statement %d after a sleep of %d ms read another statement's result", j, i)
		}
	}
	require.Positive(t, cut, "no statement was cut off by its context")
}
