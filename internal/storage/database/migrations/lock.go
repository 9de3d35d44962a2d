package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"
)

// ErrLockTimeout is returned by Up when another process held the migration
// lock for longer than Up waits for it.
var ErrLockTimeout = errors.New("timed out waiting for the migration lock")

// DefaultLockWait bounds how long Up waits for another process's migrations
// to finish. It is long because a migration that copies a large table
// (00004 on MySQL) holds the lock for as long as the copy takes.
const DefaultLockWait = 10 * time.Minute

// lockConn takes the connection a server-side lock (MySQL's GET_LOCK,
// PostgreSQL's advisory lock) lives on: the lock belongs to its session, so
// the connection stays out of the pool until the lock is released, while
// goose runs the migrations on other connections of the pool.
func lockConn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	if db.Stats().MaxOpenConnections == 1 {
		// The lock's connection would be the only one, and goose would wait
		// for another forever.
		return nil, errors.New("migration lock: the pool needs at least 2 connections (SetMaxOpenConns(1))")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	return conn, nil
}

// closeLockConn gives the lock's connection back after releasing the lock
// failed with err (nil: released). After a failed release the session may
// still hold the lock: the pool drops the connection instead, which ends
// the session and frees it. what names the lock in the error.
func closeLockConn(conn *sql.Conn, err error, what string) error {
	if err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	if cerr := conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, driver.ErrBadConn) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("release migration lock %s: %w", what, err)
	}
	return nil
}
