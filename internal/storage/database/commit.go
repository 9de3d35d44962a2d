package database

import (
	"sync/atomic"

	"gorm.io/gorm"
)

// The gorm settings that carry a commit waker and a transaction's request
// for it. They live on the *gorm.DB handed out at wiring time and on the
// sessions derived from it, not in package state.
const (
	wakerSetting   = "posting:commit_waker"
	pendingSetting = "posting:commit_wake_pending"
)

// WithCommitWaker returns a session of db whose writers can ask, through
// WakeAfterCommit, for wake to be called once what they wrote is committed:
// the service's API, scheduler and operator code get it at wiring time
// with the local relay's Wake, so that a committed outbox row is sent at
// once instead of at the relay's next poll. wake must not block (Relay.Wake
// does not); it runs on the writer's goroutine after the commit. Sessions
// derived from the returned db (WithContext, Model, Transaction, ...) keep
// the waker; a NewDB session does not.
func WithCommitWaker(db *gorm.DB, wake func()) *gorm.DB {
	if wake == nil {
		return db
	}
	return db.Set(wakerSetting, wake).Session(&gorm.Session{})
}

// WakeAfterCommit asks for db's commit waker (WithCommitWaker) to be called
// once db's writes are durable: when db is a transaction of Transaction,
// after it commits, once however often it was asked, and not at all if it
// rolls back (a nested Transaction's request counts only if its savepoint
// is kept); when db is no transaction (a statement committed on its own),
// at once. It does nothing when db carries no waker, and inside a
// transaction begun elsewhere (gorm's own db.Transaction or Begin), whose
// commit cannot be hooked: a wake before the commit would make the relay
// poll, find nothing yet and sleep a whole interval, and a rollback would
// wake it for nothing. The relay's poll is the safety net there.
func WakeAfterCommit(db *gorm.DB) {
	if p, ok := db.Get(pendingSetting); ok {
		p.(*atomic.Bool).Store(true)
		return
	}
	if inTransaction(db) {
		return
	}
	if w, ok := db.Get(wakerSetting); ok {
		w.(func())()
	}
}

// inTransaction reports whether db's statements run inside a transaction.
func inTransaction(db *gorm.DB) bool {
	_, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok
}

// withCommitWake returns db prepared for one attempt of Transaction: when
// db carries a commit waker, a db whose writers' WakeAfterCommit is
// recorded, and a function that the caller calls once the attempt
// succeeded: it calls the waker if one was asked for, or, for a
// transaction nested in one of Transaction (a savepoint kept), passes the
// request on to the outer one, whose commit is the one that counts. A
// request inside a savepoint rolled back is dropped with it. Otherwise db
// as it is and a no-op: no waker, or a transaction begun elsewhere (see
// WakeAfterCommit).
func withCommitWake(db *gorm.DB) (*gorm.DB, func()) {
	w, ok := db.Get(wakerSetting)
	if !ok {
		return db, func() {}
	}
	outer, nested := db.Get(pendingSetting)
	if !nested && inTransaction(db) {
		return db, func() {}
	}
	pending := new(atomic.Bool)
	return db.Set(pendingSetting, pending), func() {
		switch {
		case !pending.Load():
		case nested:
			outer.(*atomic.Bool).Store(true)
		default:
			w.(func())()
		}
	}
}
