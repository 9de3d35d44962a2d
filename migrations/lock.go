package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// ErrLockTimeout is returned by Up when another process held the migration
// lock for longer than Up waits for it.
var ErrLockTimeout = errors.New("timed out waiting for the migration lock")

// DefaultLockWait bounds how long Up waits for another process's migrations
// to finish. It is long because a migration that copies a large table
// (00004 on MySQL) holds the lock for as long as the copy takes.
const DefaultLockWait = 10 * time.Minute

// lockPrefix starts the name of the MySQL lock; the database name follows,
// so services on different databases of one server do not wait for each
// other.
const lockPrefix = "posting_migrate"

// lockMySQL takes GET_LOCK on one dedicated connection and keeps that
// connection out of the pool until the lock is released: a named lock
// belongs to its session, and goose runs the migrations on other
// connections of the pool meanwhile.
func lockMySQL(ctx context.Context, db *sql.DB, wait time.Duration) (func() error, error) {
	if db.Stats().MaxOpenConnections == 1 {
		// The lock's connection would be the only one, and goose would wait
		// for another forever.
		return nil, errors.New("migration lock: the pool needs at least 2 connections (SetMaxOpenConns(1))")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	var schema sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	name := mysqlLockName(schema.String)
	var got sql.NullInt64
	// GET_LOCK takes whole seconds on MySQL (fractions on MariaDB).
	secs := int64(math.Ceil(wait.Seconds()))
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, secs).Scan(&got); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("migration lock %s: %w", name, err)
	}
	if !got.Valid || got.Int64 != 1 {
		_ = conn.Close()
		if !got.Valid {
			return nil, fmt.Errorf("migration lock %s: GET_LOCK returned NULL", name)
		}
		return nil, fmt.Errorf("%w %s: another process has held it for over %s (still migrating, or stuck: see SELECT IS_USED_LOCK('%s'))",
			ErrLockTimeout, name, wait, name)
	}
	return func() error {
		// Not the caller's context: a cancelled migration must still
		// release the lock, or the session keeps it while it sits idle in
		// the pool.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var released sql.NullInt64
		err := conn.QueryRowContext(rctx, "SELECT RELEASE_LOCK(?)", name).Scan(&released)
		if err != nil {
			// The session may still hold the lock: make the pool drop the
			// connection, which ends the session and frees it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		if cerr := conn.Close(); err == nil && cerr != nil && !errors.Is(cerr, driver.ErrBadConn) {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("release migration lock %s: %w", name, err)
		}
		return nil
	}, nil
}

// mysqlLockName is posting_migrate:<database>, hashed when the name would
// exceed the 64 characters MySQL allows for a lock name.
func mysqlLockName(schema string) string {
	name := lockPrefix + ":" + schema
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(schema))
	return lockPrefix + ":" + hex.EncodeToString(sum[:])[:40]
}

// lockSQLite takes an exclusive flock on <db>.migrate.lock beside the
// database file. A file lock rather than an exclusive transaction because
// goose applies each migration in a transaction of its own on the pool's
// connections, which an exclusive transaction held on another connection
// would block; and the kernel releases a flock when its process dies, so a
// crash leaves no stale lock. An in-memory database belongs to one process
// and needs none.
func lockSQLite(ctx context.Context, db *sql.DB, wait time.Duration) (func() error, error) {
	var path string
	if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path); err != nil {
		return nil, fmt.Errorf("migration lock: find the database file: %w", err)
	}
	if path == "" {
		return func() error { return nil }, nil
	}
	lockPath := path + ".migrate.lock"
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		ok, err := tryLockFile(f)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("migration lock %s: %w", lockPath, err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("migration lock %s: %w", lockPath, ctx.Err())
		case <-deadline.C:
			_ = f.Close()
			return nil, fmt.Errorf("%w %s: another process has held it for over %s", ErrLockTimeout, lockPath, wait)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The file stays: removing it while another process waits on it would
	// let a third lock a new file of the same name.
	return func() error {
		err := unlockFile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("release migration lock %s: %w", lockPath, err)
		}
		return nil
	}, nil
}
