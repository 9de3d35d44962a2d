package relay

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// While the broker cannot be reached the pause between polls doubles from
// the interval up to OutageBackoffMax, so an outage does not turn into a
// poll every interval (and a write transaction each) against a dead broker.
func TestOutageBackoffDoubles(t *testing.T) {
	t.Parallel()
	b := setup(t, databasetest.NewSQLite(t))
	b.send.SetDown(unreachable)
	b.append(t, 1)
	var (
		mu    sync.Mutex
		polls []time.Time
	)
	r, err := New(b.store, b.send, Config{InstanceID: "a", Interval: 20 * time.Millisecond,
		StaleAfter: time.Minute, OutageBackoffMax: time.Second, Logger: slog.New(slog.DiscardHandler),
		Observe: func(res Result, _ time.Duration, _ error) {
			if res.Unavailable {
				mu.Lock()
				polls = append(polls, time.Now())
				mu.Unlock()
			}
		}})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(polls) >= 7 }, 30*time.Second, 5*time.Millisecond)
	r.Stop()
	mu.Lock()
	defer mu.Unlock()
	var gaps []time.Duration
	for i := 1; i < 7; i++ {
		gaps = append(gaps, polls[i].Sub(polls[i-1]))
	}
	t.Logf("pauses between unavailable polls: %v", gaps)
	// Expected 20, 40, 80, 160, 320, 640 ms (the last capped at 1 s); a
	// loaded machine only makes pauses longer, so check the floor of the
	// last ones and that they grew.
	require.GreaterOrEqual(t, gaps[5], 600*time.Millisecond, "the sixth pause is 20ms * 2^5")
	require.GreaterOrEqual(t, gaps[4], 300*time.Millisecond, "the fifth pause is 20ms * 2^4")
	require.Less(t, gaps[0], gaps[5]/2, "the pauses grew")
}

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
		down := databasetest.Outage(t, db.DB, databasetest.StmtUpdate) // the relay's host lost its network
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
		dbDown := databasetest.Outage(t, db.DB, databasetest.StmtUpdate)
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

// The database restarts while a batch claimed for the next poll waits:
// the polls during the restart fail, and so does the flush that would hand
// the batch back. Once the database answers again the relay hands it back
// itself (no attempt spent, no wait for the stale limit), and every event
// goes out once, in per-post order.
func TestDatabaseRestartWhileTheNextBatchWaits(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		down := databasetest.Outage(t, db.DB, databasetest.StmtQuery|databasetest.StmtRow|databasetest.StmtExec|databasetest.StmtUpdate) // restarting
		// The database's own clock: a poll begins by reading it.
		r, err := New(outbox.NewStore(db), b.send, Config{InstanceID: "a", Interval: 20 * time.Millisecond,
			BatchSize: 4, StaleAfter: time.Minute})
		require.NoError(t, err)

		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Claimed, "posts 1..4's first events sent, posts 5..8's claimed for the next poll")
		require.True(t, r.hasNext())
		sentBefore := len(b.send.SentIDs())

		down.Store(true)
		_, err = r.Pump(ctx)
		require.Error(t, err)
		_, err = r.Flush(ctx)
		require.Error(t, err)
		require.Equal(t, sentBefore, len(b.send.SentIDs()), "nothing sent while the database is away")
		down.Store(false)

		pumpUntilIdle(t, ctx, r, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))
		for _, m := range rows {
			require.Zero(t, b.row(t, m.ID).RetryCount, "row %d", m.ID)
		}
	})
}
