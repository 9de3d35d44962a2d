package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/bench"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
)

// TestBenchCleanerKeepsAConcurrentWritersRows: on a database that held
// posts (--allow-nonempty), a post and its event that another writer adds
// while the bench runs get ids above the bench's marks, interleaved with the
// bench's own; the bench's clean-up must not delete them.
func TestBenchCleanerKeepsAConcurrentWritersRows(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		at := time.Now().Add(48 * time.Hour)
		before, err := svc.Create(ctx, reservation.CreateInput{Title: "before", Content: "keep", ScheduledAt: at})
		require.NoError(t, err)

		clean, err := bench.NewCleaner(ctx, db, true)
		require.NoError(t, err)
		during, err := svc.Create(ctx, reservation.CreateInput{Title: "during", Content: "keep too", ScheduledAt: at})
		require.NoError(t, err)
		require.NoError(t, clean(ctx))

		var ids []int64
		require.NoError(t, db.Table("posts").Order("id").Pluck("id", &ids).Error)
		require.Equal(t, []int64{before.ID, during.ID}, ids, "a post the bench did not write is kept")
		var rows int64
		require.NoError(t, db.Table("outbox").Count(&rows).Error)
		require.EqualValues(t, 2, rows, "their CREATED events are kept")
	})
}
