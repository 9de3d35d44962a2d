package outbox

import (
	"context"
	"errors"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// ErrAnnounceInTransaction is Announce's refusal to run inside a
// transaction.
var ErrAnnounceInTransaction = errors.New("announce runs after the commit, not inside a transaction")

// Announce runs NOTIFY on NotifyChannel through db, a pool and not a
// transaction, so that listening relays (wakeup.Listener) poll at once for
// rows already committed. It is its own short transaction: inside a writing
// one, NOTIFY would take PostgreSQL's database-wide notification lock at
// that transaction's commit and make every writer commit one at a time.
// Callers coalesce it (wakeup.Notifier). origin, the notification's
// payload, names the process that committed the rows: its own listener
// skips it (wakeup.Config.Origin), since the commit woke its relay in the
// process already. On a database without notifications (database.Driver's
// Notifies: MySQL, SQLite) it does nothing.
func Announce(db *gorm.DB, origin string) error {
	drv := database.DriverOf(db)
	if !drv.Notifies() {
		return nil
	}
	if _, inTx := db.Statement.ConnPool.(gorm.TxCommitter); inTx {
		return ErrAnnounceInTransaction
	}
	return drv.Notify(db, NotifyChannel, origin)
}

// Notify returns a function that sends a notification with its payload on
// NotifyChannel through db, on a database that carries them
// (database.Driver's Notifies: PostgreSQL): how a wakeup.Listener checks
// that notifications reach it (wakeup.Config.Notify).
func Notify(db *gorm.DB) func(ctx context.Context, payload string) error {
	drv := database.DriverOf(db)
	return func(ctx context.Context, payload string) error {
		return drv.Notify(db.WithContext(ctx), NotifyChannel, payload)
	}
}
