package wakeup

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/database/pgbouncertest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
)

// BenchmarkCommitToBrokerPgBouncer is BenchmarkCommitToBroker through
// PgBouncer in transaction pooling, beside direct PostgreSQL in the same run:
//
//   - direct: no pooler, LISTEN on the same server (as BenchmarkCommitToBroker);
//   - pgbouncer/direct-url: the pool goes through PgBouncer, LISTEN on
//     POSTING_DATABASE_DIRECT_URL; events appended by another instance;
//   - pgbouncer/pooled-own: no direct URL, events appended by the relay's own
//     instance, whose commits wake its relay (database.WithCommitWaker);
//   - pgbouncer/pooled-other: no direct URL, events appended by another
//     instance, so the relay finds them by polling (default 5 s).
//
// It reports p50/p99/max in ms; b.N is ignored. Skipped without pgbouncer
// unless POSTING_TEST_REQUIRE_PGBOUNCER=1.
//
//	go test -run '^$' -bench CommitToBrokerPgBouncer -benchtime=1x ./wakeup/
func BenchmarkCommitToBrokerPgBouncer(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		benchPooled(b, false, true, false)
	})
	b.Run("pgbouncer/direct-url", func(b *testing.B) {
		benchPooled(b, true, true, false)
	})
	b.Run("pgbouncer/pooled-own", func(b *testing.B) {
		benchPooled(b, true, false, true)
	})
	b.Run("pgbouncer/pooled-other", func(b *testing.B) {
		benchPooled(b, true, false, false)
	})
}

// benchPooled runs commitToBroker with a relay instance and, unless own, a
// separate writer instance; through pgbouncer when pooled, with a LISTEN
// listener on the direct URL when listen.
func benchPooled(b *testing.B, pooled, listen, own bool) {
	direct := databasetest.PostgresURL(b, "")
	url := direct
	if pooled {
		url = pgbouncertest.Start(b, direct, pgbouncertest.Transaction)
	}
	writer, relayDB, producer, broker := twoInstancesAt(b, url)
	r, err := relay.New(outbox.NewStore(relayDB), producer, relay.Config{InstanceID: "relay", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	require.NoError(b, r.Start(context.Background()))
	b.Cleanup(r.Stop)
	if listen {
		require.NoError(b, relayDB.SetDirectURL(direct))
		l, err := New(Config{Connect: relayDB.ConnectPostgres, Channel: outbox.NotifyChannel, Wake: r.Wake, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		require.NoError(b, l.Start(context.Background()))
		b.Cleanup(l.Stop)
		time.Sleep(500 * time.Millisecond) // the listener's first connection and wake
	}
	if own {
		commitToBroker(b, database.WithCommitWaker(relayDB.DB, r.Wake), broker)
		return
	}
	commitToBroker(b, writer.DB, broker)
}
