package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"time"
)

// lockPrefix starts the name of the MySQL lock; the database name follows,
// so services on different databases of one server do not wait for each
// other.
const lockPrefix = "posting_migrate"

// lockMySQL takes GET_LOCK on one dedicated connection and keeps that
// connection out of the pool until the lock is released (lockConn).
func lockMySQL(ctx context.Context, db *sql.DB, wait time.Duration) (func() error, error) {
	conn, err := lockConn(ctx, db)
	if err != nil {
		return nil, err
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
		return closeLockConn(conn, err, name)
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
