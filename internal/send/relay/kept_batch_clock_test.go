package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A batch claimed beside the previous send is sent by a later poll, after
// that poll's read of the database's clock. When the database's clock moved
// on more than the relay's monotonic clock meanwhile (a failover to a server
// whose clock runs ahead, a relay host that was suspended), a rejected row's
// next_attempt_at must still be its backoff after the database's time of
// the record, as claims compare it: timed from the batch's older claim
// stamp, the retry is due at once and its backoff is skipped.
func TestRetryOfAKeptBatchWaitsItsBackoffByTheDatabaseClockReadBeforeItsSend(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })
		rows := b.append(t, 1, 2, 3, 4)
		b.send.Answer("4", errRejected)

		// Posts 1 and 2 sent; posts 3 and 4 claimed beside that send.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, res.Claimed)
		require.True(t, r.hasNext())

		// The database's clock is now 20 s ahead of the claim's stamp, still
		// well inside the stale limit (a minute).
		b.clock.Add(20 * time.Second)
		res, err = r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Retried)
		retried := b.row(t, rows[3].ID)
		require.Equal(t, outbox.StatusRetry, retried.Status)
		dbNow := b.clock.Now()
		require.False(t, retried.NextAttemptAt.Before(dbNow.Add(time.Second/2)),
			"next_attempt_at %v: the retry's backoff (at least 500ms) not after the database's time %v", retried.NextAttemptAt, dbNow)

		// Not due before its time.
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed, "the rejected row claimed again with its backoff skipped")
		_, err = r.Flush(ctx)
		require.NoError(t, err)
	})
}
