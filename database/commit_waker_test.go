package database_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

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
