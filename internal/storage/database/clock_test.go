package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

func TestNowReadsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		first, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		require.Equal(t, time.UTC, first.Location())
		// The server runs on this host: its clock is the host's.
		require.WithinDuration(t, time.Now(), first, 5*time.Second)
		time.Sleep(5 * time.Millisecond)
		second, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		require.True(t, second.After(first), "the clock moves: %s then %s", first, second)

		// Inside a transaction too.
		require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
			in, err := database.Now(ctx, tx)
			require.NoError(t, err)
			require.False(t, in.Before(first))
			return nil
		}))
	})
}

// NowExpr is the database's clock inside a statement: a stored time a
// second behind it is before it, one a second ahead after it, on every
// database (SQLite keeps times as text, so the value must be written like
// the stored ones to compare).
func TestNowExprComparesWithStoredTimes(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		now := databasetest.Now(t, db.DB)
		require.NoError(t, db.Exec("CREATE TABLE clock_probe (id INT NOT NULL PRIMARY KEY, at "+timeType(db)+" NOT NULL)").Error)
		require.NoError(t, db.Exec("INSERT INTO clock_probe (id, at) VALUES (1, ?), (2, ?)", now.Add(-time.Second), now.Add(time.Second)).Error)
		var before []int
		require.NoError(t, db.Raw("SELECT id FROM clock_probe WHERE at < ? ORDER BY id", database.NowExpr(db.DB)).Scan(&before).Error)
		require.Equal(t, []int{1}, before)
	})
}

// timeType is the column type of a time on db's dialect.
func timeType(db *database.DB) string {
	switch db.Dialect {
	case database.MySQL:
		return "DATETIME(6)"
	case database.PostgreSQL:
		return "TIMESTAMPTZ(6)"
	}
	return "DATETIME"
}
