package relay

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// A database outage longer than the stale limit does not make the relays
// take each other's claims for dead: a relay that saw the database fail
// holds stale recovery until the database has answered for a stale limit,
// so the relay that kept its acknowledgements through the outage writes
// them before any peer recovers and resends its rows.
func TestPeerDoesNotRecoverKeptAcknowledgementsAfterALongOutage(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		var mu sync.Mutex
		now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
		store := outbox.NewStore(db).WithClock(clock)
		row, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, 1, clock(), nil))
		require.NoError(t, err)
		var down atomic.Bool
		require.NoError(t, db.DB.Callback().Update().Before("gorm:update").Register("review:db_down", func(tx *gorm.DB) {
			if down.Load() {
				_ = tx.AddError(driver.ErrBadConn)
			}
		}))
		broker := relaytest.NewSender()
		broker.BeforeNextSend(func() { down.Store(true) }) // a's send: the database is cut off after a's claim
		cfg := Config{Interval: 20 * time.Millisecond, StaleAfter: time.Minute, RetryBase: time.Second, Now: clock}
		cfg.InstanceID = "a"
		a, err := New(store, broker, cfg)
		require.NoError(t, err)
		cfg.InstanceID = "b"
		b, err := New(store, broker, cfg)
		require.NoError(t, err)

		_, err = a.RunOnce(ctx) // claimed, acknowledged, SENT write failed: kept
		require.Error(t, err)
		advance(2 * time.Minute) // the outage outlasts the stale limit
		_, err = b.RunOnce(ctx)  // b polls during the outage too, and fails
		require.Error(t, err)
		down.Store(false)
		for range 3 {
			_, err := b.RunOnce(ctx)
			require.NoError(t, err)
			_, _ = a.RunOnce(ctx)
			advance(2 * time.Second)
		}
		var got outbox.Message
		require.NoError(t, db.DB.First(&got, row.ID).Error)
		require.Equal(t, outbox.StatusSent, got.Status)
		require.Zero(t, got.RetryCount, "a retry spent by a peer's recovery")
		require.Equal(t, 1, broker.Sends(row.EventID), "sent twice")

		// Once the database has answered for a stale limit, recovery is back.
		dead, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, 2, clock(), nil))
		require.NoError(t, err)
		require.NoError(t, db.DB.Model(&outbox.Message{}).Where("id = ?", dead.ID).
			Updates(map[string]any{"status": outbox.StatusProcessing, "claimed_by": "dead", "claimed_at": clock().Add(-time.Hour)}).Error)
		advance(time.Minute)
		res, err := b.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Recovered)
	})
}
