//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package migrations_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
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

// TestHelperHoldMigrationLock is not a test: run by
// TestMigrationLockOfAKilledProcessIsFreed as a child process, it takes the
// migration lock of the database in REVIEW_HOLD_LOCK_URL the way Up does
// (GET_LOCK or pg_advisory_lock on its own session, or the flock beside the SQLite file), says
// "locked" and waits to be killed.
func TestHelperHoldMigrationLock(t *testing.T) {
	url := os.Getenv("REVIEW_HOLD_LOCK_URL")
	if url == "" {
		t.Skip("helper process only")
	}
	if path, ok := strings.CutPrefix(url, "sqlite://"); ok {
		f, err := os.OpenFile(path+".migrate.lock", os.O_RDWR|os.O_CREATE, 0o600)
		require.NoError(t, err)
		require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	} else {
		db, err := database.Open(url, "")
		require.NoError(t, err)
		sqlDB, err := db.DB.DB()
		require.NoError(t, err)
		conn, err := sqlDB.Conn(context.Background())
		require.NoError(t, err)
		if db.Dialect == database.PostgreSQL {
			_, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_lock($1)", migrations.PostgresLockKey)
			require.NoError(t, err)
		} else {
			var schema string
			require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT DATABASE()").Scan(&schema))
			var got int
			require.NoError(t, conn.QueryRowContext(context.Background(), "SELECT GET_LOCK(?, 0)", migrations.MySQLLockName(schema)).Scan(&got))
			require.Equal(t, 1, got)
		}
	}
	fmt.Println("locked")
	select {}
}

// A process killed while it holds the migration lock (kill -9 during a
// start-up) does not keep the next start waiting: the server ends its session
// and drops its GET_LOCK, the kernel drops its flock, and Up proceeds within
// a short wait instead of timing out.
func TestMigrationLockOfAKilledProcessIsFreed(t *testing.T) {
	t.Parallel()
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL, database.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			url := freshURL(t, d)
			if d == database.SQLite {
				url = "sqlite://" + filepath.Join(t.TempDir(), "killed.db")
			}
			db, err := database.Open(url, "")
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			sqlDB, err := db.DB.DB()
			require.NoError(t, err)

			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldMigrationLock$", "-test.v")
			cmd.Env = append(os.Environ(), "REVIEW_HOLD_LOCK_URL="+url)
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			lines := bufio.NewScanner(out)
			locked := false
			for lines.Scan() {
				if lines.Text() == "locked" {
					locked = true
					break
				}
			}
			require.True(t, locked, "the helper never took the lock")

			// Held: Up gives up.
			_, err = migrations.UpWithLockWait(context.Background(), sqlDB, d, nil, 300*time.Millisecond)
			require.ErrorIs(t, err, migrations.ErrLockTimeout)

			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
			n, err := migrations.UpWithLockWait(context.Background(), sqlDB, d, nil, 20*time.Second)
			require.NoError(t, err, "the killed process's lock was not freed")
			require.Equal(t, migrationCount(t, d), n)
		})
	}
}
