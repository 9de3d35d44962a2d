package wakeup

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A process's own announcements do not wake its relay a second time: the
// commit that sent them woke it in the process already. The listener skips
// a notification whose payload is its Origin, and wakes for any other: an
// announcement of another process, and one without a payload (an older
// instance, an operator's command).
func TestListenerSkipsItsOwnOriginAndWakesForOthers(t *testing.T) {
	t.Parallel()
	db := databasetest.NewPostgres(t)
	woken := make(chan struct{}, 100)
	listening := make(chan struct{}, 10)
	l, err := New(Config{Connect: db.ConnectPostgres, Channel: outbox.NotifyChannel, Wake: func() { woken <- struct{}{} },
		Origin: "serve-me", CheckEvery: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	l.listening = func() { listening <- struct{}{} }
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)
	waitFor(t, listening, "LISTEN")
	waitFor(t, woken, "the wake after connecting")

	quiet := func(what string) {
		t.Helper()
		select {
		case <-woken:
			t.Fatalf("woken by %s", what)
		case <-time.After(300 * time.Millisecond):
		}
	}
	require.NoError(t, outbox.Announce(db.DB, "serve-me"))
	quiet("its own announcement")
	require.NoError(t, outbox.Announce(db.DB, "serve-other"))
	waitFor(t, woken, "another process's announcement")
	require.NoError(t, outbox.Announce(db.DB, ""))
	waitFor(t, woken, "an announcement without a payload")
	require.NoError(t, outbox.Announce(db.DB, "serve-me"))
	quiet("its own announcement")
}
