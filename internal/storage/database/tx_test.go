package database_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Two transactions lock two rows in opposite order: InnoDB picks one as the
// deadlock victim (1213) and rolls it back; Transaction re-runs it, and both
// end committed.
func TestTransactionRetriesADeadlock(t *testing.T) {
	t.Parallel()
	db := databasetest.NewMySQL(t)
	ctx := context.Background()
	require.NoError(t, db.Exec("CREATE TABLE deadlock_rows (id INT PRIMARY KEY, n INT NOT NULL, last VARCHAR(10) NOT NULL DEFAULT '')").Error)
	require.NoError(t, db.Exec("INSERT INTO deadlock_rows (id, n) VALUES (1, 0), (2, 0)").Error)

	var holding sync.WaitGroup // each first attempt holds its first row
	holding.Add(2)
	var attempts [2]atomic.Int32
	var deadlocked atomic.Bool
	run := func(who int, first, second int) error {
		return database.Transaction(ctx, db.DB, func(tx *gorm.DB) error {
			attempt := attempts[who].Add(1)
			if err := tx.Exec("UPDATE deadlock_rows SET n = n + 1, last = ? WHERE id = ?", who, first).Error; err != nil {
				return err
			}
			if attempt == 1 {
				// Both hold their first row before either asks for its
				// second: the deadlock is certain, not a matter of timing.
				holding.Done()
				holding.Wait()
			}
			err := tx.Exec("UPDATE deadlock_rows SET n = n + 1, last = ? WHERE id = ?", who, second).Error
			var me *mysqldriver.MySQLError
			if errors.As(err, &me) && me.Number == 1213 {
				deadlocked.Store(true)
			}
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(0, 1, 2) }()
	go func() { errs <- run(1, 2, 1) }()
	for range 2 {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("the transactions did not finish within 60s")
		}
	}
	require.True(t, deadlocked.Load(), "the server chose a deadlock victim")
	require.Equal(t, int32(3), attempts[0].Load()+attempts[1].Load(), "the victim ran twice, the other once")

	var ns []int
	require.NoError(t, db.Raw("SELECT n FROM deadlock_rows ORDER BY id").Scan(&ns).Error)
	require.Equal(t, []int{2, 2}, ns, "both transactions committed, the victim's first attempt did not")
}

// An error that is not a lock conflict is returned at once: fn runs once and
// its writes are rolled back.
func TestTransactionDoesNotRetryOtherErrors(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		require.NoError(t, db.Exec("CREATE TABLE once_rows (id INT PRIMARY KEY)").Error)
		require.NoError(t, db.Exec("INSERT INTO once_rows (id) VALUES (1)").Error)

		var calls atomic.Int32
		err := database.Transaction(ctx, db.DB, func(tx *gorm.DB) error {
			calls.Add(1)
			if err := tx.Exec("INSERT INTO once_rows (id) VALUES (2)").Error; err != nil {
				return err
			}
			return tx.Exec("INSERT INTO once_rows (id) VALUES (1)").Error // duplicate key
		})
		require.ErrorIs(t, err, gorm.ErrDuplicatedKey)
		require.False(t, database.IsRetryable(err))
		require.Equal(t, int32(1), calls.Load(), "not retried")

		sentinel := errors.New("business rule")
		calls.Store(0)
		err = database.Transaction(ctx, db.DB, func(*gorm.DB) error { calls.Add(1); return sentinel })
		require.ErrorIs(t, err, sentinel)
		require.Equal(t, int32(1), calls.Load(), "not retried")

		var n int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM once_rows").Scan(&n).Error)
		require.Equal(t, int64(1), n, "the failed transaction's insert was rolled back")
	})
}

// A retryable error that persists is given up after a bounded number of
// attempts, and ctx ends the waits between them.
func TestTransactionGivesUpOnPersistentConflicts(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	deadlock := &mysqldriver.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	var calls atomic.Int32
	err := database.Transaction(context.Background(), db.DB, func(*gorm.DB) error { calls.Add(1); return deadlock })
	require.ErrorIs(t, err, deadlock)
	require.Equal(t, int32(5), calls.Load(), "five attempts, then the error")

	ctx, cancel := context.WithCancel(context.Background())
	calls.Store(0)
	err = database.Transaction(ctx, db.DB, func(*gorm.DB) error { calls.Add(1); cancel(); return deadlock })
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int32(1), calls.Load(), "no attempt after ctx ended")
}

// The commit waker runs once after a transaction that asked for it commits
// (however often it asked, nested transactions included), never for a
// rollback or a transaction that did not ask, at once for a statement
// outside a transaction, and it reaches sessions derived from the wired db.
func TestCommitWaker(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		require.NoError(t, db.Exec("CREATE TABLE wake_rows (id INT PRIMARY KEY)").Error)
		var wakes atomic.Int32
		// The count the waker saw the row committed at: a wake before the
		// commit would see 0 from another connection.
		var seen atomic.Int64
		writers := database.WithCommitWaker(db.DB, func() {
			wakes.Add(1)
			var n int64
			require.NoError(t, db.DB.Raw("SELECT COUNT(*) FROM wake_rows").Scan(&n).Error)
			seen.Store(n)
		})
		insert := func(tx *gorm.DB, id int) error {
			if err := tx.Exec("INSERT INTO wake_rows (id) VALUES (?)", id).Error; err != nil {
				return err
			}
			database.WakeAfterCommit(tx)
			database.WakeAfterCommit(tx)
			return nil
		}

		require.NoError(t, database.Transaction(ctx, writers, func(tx *gorm.DB) error { return insert(tx, 1) }))
		require.EqualValues(t, 1, wakes.Load(), "one wake per commit")
		require.EqualValues(t, 1, seen.Load(), "woken after the commit")

		boom := errors.New("boom")
		require.ErrorIs(t, database.Transaction(ctx, writers, func(tx *gorm.DB) error {
			require.NoError(t, insert(tx, 2))
			return boom
		}), boom)
		require.EqualValues(t, 1, wakes.Load(), "no wake for a rollback")

		require.NoError(t, database.Transaction(ctx, writers, func(tx *gorm.DB) error {
			return tx.Exec("INSERT INTO wake_rows (id) VALUES (3)").Error
		}))
		require.EqualValues(t, 1, wakes.Load(), "no wake when not asked")

		require.NoError(t, database.Transaction(ctx, writers.WithContext(ctx), func(tx *gorm.DB) error {
			return database.Transaction(ctx, tx, func(inner *gorm.DB) error {
				if err := insert(inner, 4); err != nil {
					return err
				}
				require.EqualValues(t, 1, wakes.Load(), "no wake at the inner (savepoint) end")
				return nil
			})
		}))
		require.EqualValues(t, 2, wakes.Load(), "nested: one wake after the outer commit")
		require.EqualValues(t, 3, seen.Load())

		require.NoError(t, insert(writers.WithContext(ctx), 5))
		require.EqualValues(t, 4, wakes.Load(), "autocommit: woken at once, twice asked twice woken")

		require.NoError(t, database.Transaction(ctx, db.DB, func(tx *gorm.DB) error { return insert(tx, 6) }))
		database.WakeAfterCommit(db.DB)
		require.EqualValues(t, 4, wakes.Load(), "a db without a waker wakes nobody")
	})
}

// A write that asked for a wake is woken only once it is committed, and not
// when it is rolled back: neither a transaction begun with gorm's own
// db.Transaction (whose commit cannot be hooked) nor a nested transaction
// (a SAVEPOINT) rolled back inside an outer one that commits may wake the
// relay. A wake before the commit makes the relay poll, find nothing yet,
// and then sleep a whole interval: the row waits longer than with no wake.
func TestCommitWakerOnlyAfterACommitThatWroteIt(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		require.NoError(t, db.Exec("CREATE TABLE wake_rows (id INT PRIMARY KEY)").Error)
		var wakes atomic.Int32
		var early atomic.Int32 // wakes that found the row not committed yet
		writers := database.WithCommitWaker(db.DB, func() {
			wakes.Add(1)
			var n int64
			require.NoError(t, db.DB.Raw("SELECT COUNT(*) FROM wake_rows").Scan(&n).Error)
			if n == 0 {
				early.Add(1)
			}
		})
		insert := func(tx *gorm.DB, id int) error {
			if err := tx.Exec("INSERT INTO wake_rows (id) VALUES (?)", id).Error; err != nil {
				return err
			}
			database.WakeAfterCommit(tx)
			return nil
		}
		boom := errors.New("boom")

		// gorm's own transaction, rolled back: no wake.
		require.ErrorIs(t, writers.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			require.NoError(t, insert(tx, 1))
			return boom
		}), boom)
		require.Zero(t, wakes.Load(), "a rolled-back gorm transaction woke the relay")

		// gorm's own transaction, committed: not woken before its commit.
		require.NoError(t, writers.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return insert(tx, 2) }))
		require.Zero(t, early.Load(), "woken before the commit")

		// A nested transaction rolled back to its savepoint inside an outer
		// one that commits without any write of its own asking: no wake.
		before := wakes.Load()
		require.NoError(t, database.Transaction(ctx, writers, func(tx *gorm.DB) error {
			err := database.Transaction(ctx, tx, func(inner *gorm.DB) error {
				require.NoError(t, insert(inner, 3))
				return boom
			})
			require.ErrorIs(t, err, boom)
			return nil
		}))
		require.Equal(t, before, wakes.Load(), "a savepoint rolled back woke the relay")
		var n int64
		require.NoError(t, db.DB.Raw("SELECT COUNT(*) FROM wake_rows WHERE id = 3").Scan(&n).Error)
		require.Zero(t, n, "the savepoint was rolled back")

		// A nested transaction that commits still wakes once, after the outer commit.
		require.NoError(t, database.Transaction(ctx, writers, func(tx *gorm.DB) error {
			return database.Transaction(ctx, tx, func(inner *gorm.DB) error { return insert(inner, 4) })
		}))
		require.Equal(t, before+1, wakes.Load())
		require.Zero(t, early.Load())
	})
}

// Refused tells the database's own answer (a statement it refused) from a
// failure to hear one, after which a commit may have been applied.
func TestRefusedTellsTheDatabasesAnswerFromALostOne(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		err := db.Exec("SELECT * FROM no_such_table").Error
		require.Error(t, err)
		require.True(t, database.Refused(err), "%T %v", err, err)
	})
	for _, err := range []error{io.ErrUnexpectedEOF, driver.ErrBadConn, &net.OpError{Op: "read", Err: syscall.ECONNRESET},
		fmt.Errorf("commit: %w", io.EOF), context.DeadlineExceeded} {
		require.False(t, database.Refused(err), "%v", err)
	}
}
