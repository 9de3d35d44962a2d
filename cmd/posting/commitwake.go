package main

import (
	"context"
	"log/slog"

	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/wakeup"
	"github.com/postingsvc/posting/internal/storage/database"
)

// commitWake is what a commit of outbox rows wakes: the local relay
// (local), and on a database that carries notifications (PostgreSQL) also
// the other instances' relays, through a coalesced NOTIFY sent after the
// commit on the pool, never inside the writing transaction. It returns the
// waker for database.WithCommitWaker and the services to start with it (the
// notifier, on PostgreSQL). origin is the notifications' payload, which
// the process's own listener skips (wakeup.Config.Origin).
func commitWake(db *database.DB, local func(), origin string, log *slog.Logger) (func(), []startstop.Service, error) {
	if !db.Driver().Notifies() {
		return local, nil, nil
	}
	n, err := wakeup.NewNotifier(wakeup.NotifierConfig{
		Send:   func(ctx context.Context) error { return outbox.Announce(db.DB.WithContext(ctx), origin) },
		Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	return func() { local(); n.Notify() }, []startstop.Service{n}, nil
}
