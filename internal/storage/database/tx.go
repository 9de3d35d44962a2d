package database

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/backoff"
)

// maxTxAttempts bounds how often Transaction re-runs a transaction that lost a
// deadlock or a lock wait.
const maxTxAttempts = 5

// Transaction runs fn in one transaction of db and commits it, re-running the
// whole transaction when the database chose it as a deadlock victim or a lock
// wait timed out (MySQL 1213/1205, PostgreSQL 40001/40P01/55P03, SQLite
// busy). fn must be safe to re-run: it
// sees none of the failed attempt's writes. When db carries a commit waker
// (WithCommitWaker) and fn called WakeAfterCommit, the waker runs once the
// transaction committed. opts, when given, begin the transaction (its
// isolation level).
func Transaction(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error, opts ...*sql.TxOptions) error {
	var err error
	for attempt := 1; ; attempt++ {
		// A fresh request per attempt: a rolled-back attempt's writes wake
		// no one.
		tx, woken := withCommitWake(db.WithContext(ctx))
		err = tx.Transaction(fn, opts...)
		if err == nil {
			woken()
			return nil
		}
		if !IsRetryable(err) || attempt == maxTxAttempts {
			return err
		}
		if !backoff.Sleep(ctx, time.Duration(attempt*attempt)*5*time.Millisecond) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// IsRetryable reports whether err is a transient lock conflict after which the
// same transaction may succeed when run again.
func IsRetryable(err error) bool {
	for _, d := range drivers() {
		if d.IsRetryable(err) {
			return true
		}
	}
	return false
}
