package wakeup

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/database/pgbouncertest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/outbox"
)

// openThroughPgBouncer opens a fresh PostgreSQL database through its own
// PgBouncer in transaction pooling, and returns it with the database's
// direct URL.
func openThroughPgBouncer(t *testing.T) (*database.DB, string) {
	t.Helper()
	direct := databasetest.PostgresURL(t, "")
	db, err := database.Open(pgbouncertest.Start(t, direct, pgbouncertest.Transaction), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db, direct
}

// startProbingListener starts a Listener whose LISTEN connection is db's
// (ConnectPostgres) and whose probe goes through db's pool, logging to the
// returned buffer; woken receives every wake.
func startProbingListener(t *testing.T, db *database.DB) (*Listener, *logtest.Buffer, <-chan struct{}) {
	t.Helper()
	return startProbingListenerWith(t, db, outbox.Notify(db.DB))
}

// startProbingListenerWith is startProbingListener whose probe is sent by
// notify.
func startProbingListenerWith(t *testing.T, db *database.DB, notify func(context.Context, string) error) (*Listener, *logtest.Buffer, <-chan struct{}) {
	t.Helper()
	logs := &logtest.Buffer{}
	woken := make(chan struct{}, 100)
	l, err := New(Config{Connect: db.ConnectPostgres, Channel: outbox.NotifyChannel,
		Wake:       func() { woken <- struct{}{} },
		Notify:     notify,
		ProbeWait:  time.Second,
		CheckEvery: 200 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)
	return l, logs, woken
}

// Through PgBouncer in transaction mode a LISTEN session does not last: the
// listener finds out with its probe, logs one warning naming the pooler and
// POSTING_DATABASE_DIRECT_URL, and stops instead of reconnecting.
func TestListenerThroughTransactionPoolerWarnsOnceAndStops(t *testing.T) {
	t.Parallel()
	db, _ := openThroughPgBouncer(t)
	l, logs, _ := startProbingListener(t, db)
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the listener kept going through the pooler")
	}
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	require.Contains(t, out, "pooler in transaction mode")
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL")
}

// A probe that could not be sent (the pooler restarting as serve starts)
// proves nothing: the next connection probes again, and through the pooler
// the listener still warns and stops instead of listening on a session that
// never hears anything.
func TestListenerThroughTransactionPoolerProbesAgainAfterAFailedSend(t *testing.T) {
	t.Parallel()
	db, _ := openThroughPgBouncer(t)
	var sends atomic.Int32
	notify := func(ctx context.Context, payload string) error {
		if sends.Add(1) == 1 {
			return errors.New("pooler restarting")
		}
		return outbox.Notify(db.DB)(ctx, payload)
	}
	l, logs, _ := startProbingListenerWith(t, db, notify)
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("the listener kept listening through the pooler after %d probe sends\n%s", sends.Load(), logs.String())
	}
	require.Contains(t, logs.String(), "pooler in transaction mode")
}

// A probe whose send used up the wait (a busy pool handing over a
// connection only as the wait ends) is no sign of a pooler: on a direct
// server the listener gets its own wait for the delivery, stays up without
// a warning, and wakes.
func TestListenerOnDirectServerDoesNotWarnWhenTheProbeSendIsSlow(t *testing.T) {
	t.Parallel()
	db, err := database.Open(databasetest.PostgresURL(t, ""), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	notify := func(ctx context.Context, payload string) error {
		<-ctx.Done()
		return outbox.Notify(db.DB)(context.WithoutCancel(ctx), payload)
	}
	l, logs, woken := startProbingListenerWith(t, db, notify)
	select {
	case <-woken:
	case <-l.Done():
		t.Fatalf("the listener stopped on a direct server\n%s", logs.String())
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for the wake after connecting")
	}
	require.NotContains(t, logs.String(), "level=WARN")
}

// With the direct URL set, the pool still goes through PgBouncer but the
// listener's session does not: its probe arrives, nothing is logged, and a
// commit through the pooler wakes it.
func TestListenerOnDirectURLHearsCommitsThroughThePooler(t *testing.T) {
	t.Parallel()
	db, direct := openThroughPgBouncer(t)
	require.NoError(t, db.SetDirectURL(direct))

	l, logs, woken := startProbingListener(t, db)
	waitFor(t, woken, "the wake after connecting")
	for len(woken) > 0 {
		<-woken
	}
	require.NoError(t, outbox.Notify(db.DB)(context.Background(), "commit"))
	waitFor(t, woken, "the wake of a notification sent through the pooler")
	select {
	case <-l.Done():
		t.Fatal("the listener stopped")
	default:
	}
	require.NotContains(t, logs.String(), "level=WARN")
}
