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
	"time"
)

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
