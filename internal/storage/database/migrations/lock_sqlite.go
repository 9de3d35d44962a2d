package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"
)

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
