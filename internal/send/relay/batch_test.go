package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Under a backlog each full poll doubles the next claim, from the
// configured batch up to its bound; once the backlog is gone the batch is
// the configured one again. Every row is sent once, each post's events in
// their order.
func TestBatchGrowsUnderABacklogAndShrinksWhenIdle(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		// 2,000 rows, 2 per post: a claim takes one row per post (the next
		// waits for the one before), so 1,000 posts let a claim reach 800.
		rows := relaytest.Seed(t, db.DB, 1000, 2, b.clock.Now())
		r := b.relay(t, "grow", func(c *Config) { c.BatchSize, c.MaxBatchSize = 100, 800 })
		ctx := context.Background()
		var claimed, sizes []int
		for {
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			claimed, sizes = append(claimed, res.Claimed), append(sizes, r.BatchSize())
			if res.Claimed == 0 {
				break
			}
		}
		_, err := r.Flush(ctx)
		require.NoError(t, err)
		require.Equal(t, []int{100, 200, 400, 800, 500, 0}, claimed)
		require.Equal(t, []int{200, 400, 800, 800, 800, 100}, sizes)
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))

		requireOrderedOnce(t, rows, b.send.SentIDs())

		// Idle again: a few new rows are one claim of the configured size.
		b.append(t, 1, 2, 3)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, res.Claimed)
		require.Equal(t, 100, r.BatchSize())
	})
}

// A bound at or below the configured batch keeps the batch fixed.
func TestBatchStaysFixedWhenItsBoundIsTheBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, databasetest.NewSQLite(t))
	relaytest.Seed(t, b.db.DB, 100, 5, b.clock.Now())
	r := b.relay(t, "fixed", func(c *Config) { c.BatchSize, c.MaxBatchSize = 100, 100 })
	for range 5 {
		res, err := r.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 100, res.Claimed)
		require.Equal(t, 100, r.BatchSize())
	}
}

func TestMaxBatchSizeLimits(t *testing.T) {
	t.Parallel()
	for _, v := range []int{-1, 5001} {
		_, err := New(outbox.NewStore(databasetest.NewSQLite(t)), relaytest.NewSender(), Config{InstanceID: "x", MaxBatchSize: v})
		require.ErrorContains(t, err, "relay.Config.MaxBatchSize")
	}
}
