package outbox

import (
	"errors"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
)

// ErrAnnounceInTransaction is Announce's refusal to run inside a
// transaction.
var ErrAnnounceInTransaction = errors.New("announce runs after the commit, not inside a transaction")

// Announce runs NOTIFY on NotifyChannel through db, a pool and not a
// transaction, so that listening relays (wakeup.Listener) poll at once for
// rows already committed. It is its own short transaction: inside a writing
// one, NOTIFY would take PostgreSQL's database-wide notification lock at
// that transaction's commit and make every writer commit one at a time.
// Callers coalesce it (wakeup.Notifier). On MySQL and SQLite, which have no
// such signal, it does nothing.
func Announce(db *gorm.DB) error {
	if database.DialectOf(db) != database.PostgreSQL {
		return nil
	}
	if _, inTx := db.Statement.ConnPool.(gorm.TxCommitter); inTx {
		return ErrAnnounceInTransaction
	}
	return db.Exec("NOTIFY " + NotifyChannel).Error
}
