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
// rolls back; otherwise (a statement of its own, committed already) at
// once. It does nothing when db carries no waker.
func WakeAfterCommit(db *gorm.DB) {
	if p, ok := db.Get(pendingSetting); ok {
		p.(*atomic.Bool).Store(true)
		return
	}
	// Not a transaction of Transaction: a statement that committed on its
	// own, or a transaction begun elsewhere, whose commit cannot be hooked
	// (the wake may then come early, and the poll is the safety net).
	if w, ok := db.Get(wakerSetting); ok {
		w.(func())()
	}
}

// withCommitWake returns db prepared for one attempt of Transaction: when
// db carries a commit waker and is not already inside a transaction of
// Transaction, a db whose writers' WakeAfterCommit is recorded, and a
// function that calls the waker if one was asked for; the caller calls it
// after the commit. Otherwise db as it is and a no-op.
func withCommitWake(db *gorm.DB) (*gorm.DB, func()) {
	w, ok := db.Get(wakerSetting)
	if !ok {
		return db, func() {}
	}
	if _, nested := db.Get(pendingSetting); nested {
		// The outer transaction's commit is the one that counts.
		return db, func() {}
	}
	pending := new(atomic.Bool)
	return db.Set(pendingSetting, pending), func() {
		if pending.Load() {
			w.(func())()
		}
	}
}
