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
	"github.com/postingsvc/posting/relay/relaytest"
)

// loseClaimAnswer makes the first claim of r that takes rows report a lost
// connection instead: its commit went through, its answer did not (a
// primary killed during the commit, a cut connection). The returned flag
// tells whether it has.
func loseClaimAnswer(r *Relay) *atomic.Bool {
	var lost atomic.Bool
	r.claimAnswer = func(msgs []outbox.Message, err error) ([]outbox.Message, error) {
		if err == nil && len(msgs) > 0 && lost.CompareAndSwap(false, true) {
			return nil, driver.ErrBadConn
		}
		return msgs, err
	}
	return &lost
}

// A claim whose answer was lost left its rows PROCESSING under this relay's
// run. The next poll reads them back and releases them before it claims:
// they are sent then, in order, with no attempt spent, instead of holding
// their posts for the stale limit and spending an attempt each.
func TestClaimWithoutAnAnswerIsReleasedAtTheNextPoll(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 1, 2)
		r := b.relay(t, "a")
		lost := loseClaimAnswer(r)

		_, err := r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.True(t, lost.Load())
		require.Empty(t, b.send.SentIDs())
		for _, m := range []outbox.Message{rows[0], rows[2]} {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusProcessing, got.Status, "the claim was committed")
			require.Equal(t, r.Owner(), *got.ClaimedBy)
		}

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Released, "the lost claim's rows were handed back")
		require.Equal(t, 2, res.Lost)
		require.Equal(t, 2, res.Claimed)
		pumpUntilIdle(t, ctx, r, 10)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Len(t, b.send.SentIDs(), 3)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Zero(t, got.RetryCount, "row %d spent an attempt", m.ID)
		}
	})
}

// The read-back takes only this run's claims: rows a crashed earlier run
// left under the same InstanceID (which stale recovery counts as an
// attempt, so a row that kills its relay ends in FAIL), and rows another
// process given the same InstanceID is sending, stay as they are.
func TestClaimWithoutAnAnswerLeavesOtherRunsClaimsAlone(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		crashed := b.append(t, 1)[0]
		dead := b.relay(t, "host-1")
		cctx, cancel := context.WithCancel(ctx)
		dead.afterClaim = cancel
		_, err := dead.RunOnce(cctx)
		require.ErrorIs(t, err, context.Canceled)

		// A second process with the same id, its send in the air.
		inFlight := b.append(t, 2)[0]
		twinSend := relaytest.NewSender()
		release := twinSend.Hold()
		twin, err := New(b.store, twinSend, b.relay(t, "host-1").Config())
		require.NoError(t, err)
		twinDone := make(chan error, 1)
		go func() { _, err := twin.RunOnce(ctx); twinDone <- err }()
		<-twinSend.Entered()

		mine := b.append(t, 3)[0]
		r := b.relay(t, "host-1")
		require.NotEqual(t, dead.Owner(), r.Owner())
		require.NotEqual(t, twin.Owner(), r.Owner())
		loseClaimAnswer(r)
		_, err = r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Released, "only its own lost claim")
		require.Equal(t, []int64{mine.ID}, b.send.SentIDs())

		got := b.row(t, crashed.ID)
		require.Equal(t, outbox.StatusProcessing, got.Status, "left to stale recovery")
		require.Equal(t, dead.Owner(), *got.ClaimedBy)
		require.Equal(t, outbox.StatusProcessing, b.row(t, inFlight.ID).Status, "the twin's claim is not taken")

		release()
		require.NoError(t, <-twinDone)
		got = b.row(t, inFlight.ID)
		require.Equal(t, outbox.StatusSent, got.Status, "the twin's acknowledgement was not fenced")
		require.Zero(t, got.RetryCount)
		require.Equal(t, []int64{inFlight.ID}, twinSend.SentIDs())
	})
}

// The loop releases a lost claim's rows before it pauses after the failed
// poll, so they wait for no stale limit even when no new row comes.
func TestLoopReleasesALostClaimBeforePausing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		row := b.append(t, 1)[0]
		r := b.relay(t, "a", func(c *Config) { c.Interval = time.Hour; c.OutageBackoffMax = time.Hour; c.StaleAfter = 3 * time.Hour })
		lost := loseClaimAnswer(r)
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
		require.Eventually(t, func() bool { return lost.Load() && b.row(t, row.ID).Status == outbox.StatusPending },
			10*time.Second, 10*time.Millisecond, "released while the loop pauses")
		r.Wake()
		require.Eventually(t, func() bool { return b.row(t, row.ID).Status == outbox.StatusSent }, 10*time.Second, 10*time.Millisecond)
		require.Zero(t, b.row(t, row.ID).RetryCount)
		require.Equal(t, []int64{row.ID}, b.send.SentIDs())
	})
}

// A rejection whose write failed is written by the next poll: the row
// spends exactly the one attempt, at once, not a second one through stale
// recovery after the limit.
func TestFailedRejectionWriteIsKeptForTheNextPoll(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 1)
		b.send.Reject(func(m outbox.Message) error {
			if m.ID == rows[0].ID {
				return errRejected
			}
			return nil
		})
		var failed atomic.Bool
		databasetest.Fail(t, db.DB, databasetest.StmtUpdate, driver.ErrBadConn, func(tx *gorm.DB) bool {
			m, ok := tx.Statement.Dest.(map[string]any)
			return ok && m["status"] == outbox.StatusRetry && failed.CompareAndSwap(false, true)
		})
		r := b.relay(t, "a")

		_, err := r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.True(t, failed.Load())
		require.Equal(t, outbox.StatusProcessing, b.row(t, rows[0].ID).Status, "not written yet")

		_, err = r.RunOnce(ctx)
		require.NoError(t, err)
		got := b.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusRetry, got.Status)
		require.Equal(t, 1, got.RetryCount, "one rejection, one attempt")
		require.Contains(t, *got.LastError, "INVALID_RECORD")
		require.Equal(t, outbox.StatusPending, b.row(t, rows[1].ID).Status, "its successor waits")
	})
}
