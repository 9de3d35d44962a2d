package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
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
