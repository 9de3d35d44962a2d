package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
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
		s := setup(t, db)
		row := s.append(t, 1)[0]
		down := cutWrites(t, db)
		broker := s.send
		broker.BeforeNextSend(func() { down.Store(true) }) // a's send: the database is cut off after a's claim
		cfg := Config{Interval: 20 * time.Millisecond, StaleAfter: time.Minute, RetryBase: time.Second, Now: s.clock.Now}
		cfg.InstanceID = "a"
		a, err := New(s.store, broker, cfg)
		require.NoError(t, err)
		cfg.InstanceID = "b"
		b, err := New(s.store, broker, cfg)
		require.NoError(t, err)

		_, err = a.RunOnce(ctx) // claimed, acknowledged, SENT write failed: kept
		require.Error(t, err)
		s.clock.Add(2 * time.Minute) // the outage outlasts the stale limit
		_, err = b.RunOnce(ctx)      // b polls during the outage too, and fails
		require.Error(t, err)
		down.Store(false)
		for range 3 {
			_, err := b.RunOnce(ctx)
			require.NoError(t, err)
			_, _ = a.RunOnce(ctx)
			s.clock.Add(2 * time.Second)
		}
		var got outbox.Message
		require.NoError(t, db.DB.First(&got, row.ID).Error)
		require.Equal(t, outbox.StatusSent, got.Status)
		require.Zero(t, got.RetryCount, "a retry spent by a peer's recovery")
		require.Equal(t, 1, broker.Sends(row.EventID), "sent twice")

		// Once the database has answered for a stale limit, recovery is back.
		dead := s.append(t, 2)[0]
		require.NoError(t, db.DB.Model(&outbox.Message{}).Where("id = ?", dead.ID).
			Updates(map[string]any{"status": outbox.StatusProcessing, "claimed_by": "dead", "claimed_at": s.clock.Now().Add(-time.Hour)}).Error)
		s.clock.Add(time.Minute)
		res, err := b.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Recovered)
	})
}
