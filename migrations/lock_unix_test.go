//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package migrations_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/migrations"
)

// While another process holds the SQLite file lock, Up waits for it and
// gives up with ErrLockTimeout naming the lock file.
func TestUpWaitsForTheSQLiteLock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "locked.db")
	db, err := database.Open("sqlite://"+path, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)

	f, err := os.OpenFile(path+".migrate.lock", os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))

	_, err = migrations.UpWithLockWait(context.Background(), sqlDB, database.SQLite, nil, 300*time.Millisecond)
	require.ErrorIs(t, err, migrations.ErrLockTimeout)
	require.ErrorContains(t, err, path+".migrate.lock")
	require.False(t, db.Migrator().HasTable("posts"), "nothing applied without the lock")

	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
	n, err := migrations.UpWithLockWait(context.Background(), sqlDB, database.SQLite, nil, time.Second)
	require.NoError(t, err)
	require.Equal(t, migrationCount(t, database.SQLite), n)
	// Released: the file lock can be taken again at once.
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
}
