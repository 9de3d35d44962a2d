package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// postgresLockKey is the pg_advisory_lock key of the migrations: "posting"
// in ASCII. Advisory locks belong to one database, so services on different
// databases of one server do not wait for each other. pg_locks shows it as
// classid 7368563, objid 1953066599.
const postgresLockKey int64 = 0x706f7374696e67

// lockPostgres takes pg_advisory_xact_lock in a transaction it keeps open
// on one dedicated connection until the lock is released: goose runs the
// migrations on other connections of the pool meanwhile, and ending the
// transaction (or the session dying) frees the lock. A transaction-scoped
// lock, unlike pg_advisory_lock, holds through a pooler in transaction mode
// (PgBouncer), which pins one server connection to a client for the length
// of a transaction and no longer; a session lock taken there would stay on
// a server connection that other clients then use. The wait is bounded with
// a transaction-local lock_timeout (and not by a statement_timeout of the
// URL), so it ends as soon as the holder releases the lock; nothing is SET
// on the session.
func lockPostgres(ctx context.Context, db *sql.DB, wait time.Duration) (func() error, error) {
	conn, err := lockConn(ctx, db)
	if err != nil {
		return nil, err
	}
	// Not the caller's context: database/sql rolls a transaction back when
	// its context ends, which would free the lock while goose still runs.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	fail := func(err error) (func() error, error) {
		_ = tx.Rollback()
		_ = conn.Close()
		return nil, err
	}
	ms := max(wait.Milliseconds(), 1)
	// lock_timeout bounds the wait; a statement_timeout from the URL (the
	// options parameter) must not cut it short, or a process started while
	// another migrates fails instead of waiting for it.
	if _, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', '0', true)", strconv.FormatInt(ms, 10)); err != nil {
		return fail(fmt.Errorf("migration lock: %w", err))
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", postgresLockKey); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" {
			return fail(fmt.Errorf("%w pg_advisory_xact_lock(%d): another process has held it for over %s (still migrating, or stuck: see SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 1953066599)",
				ErrLockTimeout, postgresLockKey, wait))
		}
		return fail(fmt.Errorf("migration lock pg_advisory_xact_lock(%d): %w", postgresLockKey, err))
	}
	return func() error {
		return closeLockConn(conn, tx.Rollback(), fmt.Sprintf("pg_advisory_xact_lock(%d)", postgresLockKey))
	}, nil
}
