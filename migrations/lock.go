package migrations

import (
	"errors"
	"time"
)

// ErrLockTimeout is returned by Up when another process held the migration
// lock for longer than Up waits for it.
var ErrLockTimeout = errors.New("timed out waiting for the migration lock")

// DefaultLockWait bounds how long Up waits for another process's migrations
// to finish. It is long because a migration that copies a large table
// (00004 on MySQL) holds the lock for as long as the copy takes.
const DefaultLockWait = 10 * time.Minute
