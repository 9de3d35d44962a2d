package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
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

// lockPostgres takes pg_advisory_lock on one dedicated connection and keeps
// that connection out of the pool until the lock is released: a session
// lock belongs to its session, and goose runs the migrations on other
// connections of the pool meanwhile. The wait is bounded with the session's
// lock_timeout (and not by a statement_timeout of the URL), so it ends as
// soon as the holder releases the lock; the server frees the lock of a
// session that dies.
func lockPostgres(ctx context.Context, db *sql.DB, wait time.Duration) (func() error, error) {
	if db.Stats().MaxOpenConnections == 1 {
		return nil, errors.New("migration lock: the pool needs at least 2 connections (SetMaxOpenConns(1))")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	fail := func(err error) (func() error, error) {
		// The session may hold the lock or a changed lock_timeout: drop it.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
		return nil, err
	}
	ms := max(wait.Milliseconds(), 1)
	// lock_timeout bounds the wait; a statement_timeout from the URL (the
	// options parameter) must not cut it short, or a process started while
	// another migrates fails instead of waiting for it.
	if _, err := conn.ExecContext(ctx, "SELECT set_config('lock_timeout', $1, false), set_config('statement_timeout', '0', false)", strconv.FormatInt(ms, 10)); err != nil {
		return fail(fmt.Errorf("migration lock: %w", err))
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", postgresLockKey); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" {
			return fail(fmt.Errorf("%w pg_advisory_lock(%d): another process has held it for over %s (still migrating, or stuck: see SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 1953066599)",
				ErrLockTimeout, postgresLockKey, wait))
		}
		return fail(fmt.Errorf("migration lock pg_advisory_lock(%d): %w", postgresLockKey, err))
	}
	for _, reset := range []string{"RESET lock_timeout", "RESET statement_timeout"} {
		if _, err := conn.ExecContext(ctx, reset); err != nil {
			return fail(fmt.Errorf("migration lock: %w", err))
		}
	}
	return func() error {
		// Not the caller's context: a cancelled migration must still release
		// the lock, or the session keeps it while it sits idle in the pool.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released sql.NullBool
		err := conn.QueryRowContext(rctx, "SELECT pg_advisory_unlock($1)", postgresLockKey).Scan(&released)
		if err == nil && !released.Bool {
			err = errors.New("the session did not hold it")
		}
		if err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		if cerr := conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, driver.ErrBadConn) {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("release migration lock pg_advisory_lock(%d): %w", postgresLockKey, err)
		}
		return nil
	}, nil
}
