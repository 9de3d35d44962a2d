package relay

import (
	"context"
	"database/sql/driver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
)

// A relay cut off from the broker and the database at once (its host's
// network fails) cannot hand its claimed rows back. When the network returns
// it must hand them back itself, with no attempt spent, rather than leave
// them PROCESSING until stale recovery spends one of their retries and holds
// their posts for the whole stale limit: an outage is not the rows' fault.
func TestUnreachableBrokerAndFailedReleaseSpendNoRetry(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		row := b.append(t, 1)[0]

		broker := b.send
		broker.SetDown(unreachable)
		dbDown := cutWrites(t, db)
		// The database is cut off once the rows are claimed, before the send,
		// like a host losing its network mid-poll.
		broker.BeforeNextSend(func() { dbDown.Store(true) })
		r, err := New(b.store, broker, Config{InstanceID: "a", Interval: 20 * time.Millisecond, StaleAfter: time.Minute, Now: b.clock.Now})
		require.NoError(t, err)

		// Claimed, then broker and database unreachable: the release fails.
		res, err := r.RunOnce(ctx)
		require.Error(t, err)
		require.Equal(t, 1, res.Claimed)

		// The network returns, and the broker with it, within the stale limit.
		dbDown.Store(false)
		broker.SetDown(nil)
		for range 3 {
			b.clock.Add(30 * time.Second) // past the stale limit by the second poll
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
		}
		require.NoError(t, func() error { _, err := r.Flush(ctx); return err }())

		var got outbox.Message
		require.NoError(t, db.DB.First(&got, row.ID).Error)
		require.Equal(t, outbox.StatusSent, got.Status)
		require.Zero(t, got.RetryCount, "an outage spent a retry (last_error %v)", got.LastError)
		require.Equal(t, 1, broker.Sends(row.EventID))
	})
}

// cutWrites makes every UPDATE through db fail as on a lost connection while
// the returned flag is set: the database cut off from a relay whose host
// lost its network.
func cutWrites(t *testing.T, db *database.DB) *atomic.Bool {
	t.Helper()
	var down atomic.Bool
	require.NoError(t, db.DB.Callback().Update().Before("gorm:update").Register("test:db_down", func(tx *gorm.DB) {
		if down.Load() {
			_ = tx.AddError(driver.ErrBadConn)
		}
	}))
	return &down
}
