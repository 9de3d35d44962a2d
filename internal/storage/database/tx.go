package database

import (
	"context"
	"database/sql"
	"errors"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
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

// Refused reports whether err is the database's own answer, an error it
// reported for a statement or a commit (the transaction is then rolled
// back), rather than a failure to hear one, such as a connection cut while a
// commit was on its way, after which the commit may have been applied.
// SQLite runs in the process and always answers.
func Refused(err error) bool {
	var pe *pgconn.PgError
	var me *mysqldriver.MySQLError
	var coded interface{ Code() int }
	return errors.As(err, &pe) || errors.As(err, &me) || errors.As(err, &coded)
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
