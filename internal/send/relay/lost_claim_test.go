package relay

import (
	"context"
	"database/sql/driver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// loseClaimAnswer makes the next claim of r report a lost connection
// instead of what it returned (with withRows, the next that took rows):
// its commit went through, its answer did not (a primary killed during the
// commit, a cut connection). The returned flag tells whether it has.
func loseClaimAnswer(r *Relay, withRows bool) *atomic.Bool {
	var lost atomic.Bool
	r.testHooks().claimAnswer = func(msgs []outbox.Message, err error) ([]outbox.Message, error) {
		if err == nil && (len(msgs) > 0 || !withRows) && lost.CompareAndSwap(false, true) {
			return nil, driver.ErrBadConn
		}
		return msgs, err
	}
	return &lost
}

// loseSecondClaimAnswer makes the second claim of r (with a full batch,
// the claim of the next batch taken during the first one's send) report a
// lost connection although it committed.
func loseSecondClaimAnswer(r *Relay) {
	var claims atomic.Int32
	r.testHooks().claimAnswer = func(msgs []outbox.Message, err error) ([]outbox.Message, error) {
		if claims.Add(1) == 2 && err == nil {
			return nil, driver.ErrBadConn
		}
		return msgs, err
	}
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
		lost := loseClaimAnswer(r, true)

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
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
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
		dead.testHooks().afterClaim = cancel
		_, err := dead.RunOnce(cctx)
		require.ErrorIs(t, err, context.Canceled)

		// A second process with the same id, its send in the air.
		inFlight := b.append(t, 2)[0]
		twinSend := relaytest.NewSender()
		release := twinSend.Hold()
		twin := b.relayVia(t, twinSend, "host-1")
		twinDone := make(chan error, 1)
		go func() { _, err := twin.RunOnce(ctx); twinDone <- err }()
		<-twinSend.Entered()

		mine := b.append(t, 3)[0]
		r := b.relay(t, "host-1")
		require.NotEqual(t, dead.Owner(), r.Owner())
		require.NotEqual(t, twin.Owner(), r.Owner())
		loseClaimAnswer(r, true)
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
		lost := loseClaimAnswer(r, true)
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
		b.send.Reject(func(m event.Message) error {
			if m.Sequence() == rows[0].ID {
				return errRejected
			}
			return nil
		})
		failed := failWriteOnce(t, db, outbox.StatusRetry)
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

// shortSender hands every message to the broker but, on its first call,
// answers one result fewer than it was given: the relay cannot tell which
// message the missing answer belongs to, so it records nothing and leaves
// the batch to stale recovery (the stale limit keeps a resend behind any
// copy still on its way).
type shortSender struct {
	*relaytest.Sender
	broke atomic.Bool
}

func (s *shortSender) Send(ctx context.Context, msgs []event.Message) []error {
	errs := s.Sender.Send(ctx, msgs)
	if len(errs) > 0 && s.broke.CompareAndSwap(false, true) {
		return errs[:len(errs)-1]
	}
	return errs
}

// shortRelay is a relay "a" sending through b's sender answered short once
// (shortSender); what reached the broker is in b.send.
func (b *bundle) shortRelay(t *testing.T, mutate ...func(*Config)) *Relay {
	t.Helper()
	return b.relayVia(t, &shortSender{Sender: b.send}, "a", mutate...)
}

// A batch whose sender answered for fewer messages than it was given is
// sent but not recorded: its outcome is unknown, and the relay leaves it
// PROCESSING for stale recovery. The read-back after a failed claim must
// not take it for the rows of a claim without an answer: releasing it would
// send it again at once, with no attempt spent and before the stale limit
// that keeps a resend behind a copy still in the air.
func TestLostClaimReadBackLeavesAnUnrecordedSendToStaleRecovery(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 2)
		r := b.shortRelay(t)

		_, err := r.RunOnce(ctx)
		require.ErrorContains(t, err, "sender returned 1 results for 2 messages")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs())

		// A database blip fails the next claim (which found nothing to take).
		failed := loseClaimAnswer(r, false)
		_, err = r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.True(t, failed.Load())

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Released, "the unrecorded send was released")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs(), "sent again before the stale limit")
		b.requireStatus(t, rows, outbox.StatusProcessing, "left to stale recovery")
	})
}

// The same through the pipelined path: the claim of the next batch commits
// but its answer is lost while a full batch is in the air, and the sender
// answers that batch short. The next poll reads back its own claims and must leave the
// unrecorded batch alone.
func TestLostNextClaimReadBackLeavesAnUnrecordedPipelinedSendToStaleRecovery(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 2, 3, 4)
		r := b.shortRelay(t, func(c *Config) { c.BatchSize = 2 })
		// The first claim (before the send) succeeds, the one of the
		// next batch (during the send) fails.
		loseSecondClaimAnswer(r)

		_, err := r.Pump(ctx)
		require.ErrorContains(t, err, "sender returned 1 results for 2 messages")
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs())

		// The lost claim had taken rows 3 and 4: those, and only those,
		// go back.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Released, "the unrecorded send was released with the lost claim's rows")
		b.requireStatus(t, rows[:2], outbox.StatusProcessing, "left to stale recovery")
		for _, id := range b.send.SentIDs()[2:] {
			require.NotContains(t, []int64{rows[0].ID, rows[1].ID}, id, "row %d sent again before the stale limit", id)
		}
	})
}

// An InstanceID goes into claimed_by, which PostgreSQL and MySQL store as
// UTF-8 text: an id that is not valid UTF-8, or holds a NUL, cannot be
// written there. Either New refuses it (as it refuses one too long for the
// column), or a relay given it claims and sends; a relay that starts and
// then fails every claim for good is neither.
func TestInstanceIDTheClaimsColumnCannotHoldIsRefused(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		for _, id := range []string{"host-\xff", "host-\x00-1"} {
			b := setup(t, db)
			row := b.append(t, 1)[0]
			cfg := b.relay(t, "a").Config()
			cfg.InstanceID = id
			r, err := New(b.store, b.send, cfg)
			if err != nil {
				require.ErrorContains(t, err, "invalid relay config", "%q", id)
				continue
			}
			res, err := r.RunOnce(context.Background())
			require.NoError(t, err, "New took %q, which the claims cannot hold", id)
			require.Equal(t, 1, res.Claimed, "%q", id)
			require.Equal(t, outbox.StatusSent, b.row(t, row.ID).Status, "%q", id)
		}
	})
}

// A claim carries the deferred acknowledgements of the batch before; when
// its commit goes through and its answer is lost, those rows are SENT, by
// this relay's own write. Writing them again must count them as sent, not
// as fenced: a fenced write means another instance recovered the claim (the
// relay logs so and posting_relay_claim_conflicts_total counts it), and no
// other instance is there.
func TestLostClaimAnswerCountsItsAcknowledgementsAsSentNotFenced(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks()
		rows := b.append(t, 1, 2, 3, 4)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })
		loseSecondClaimAnswer(r) // committed: the acknowledgements and the next batch

		var total Result
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Deferred)
		_, err = r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		for range 5 {
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			total.Sent += res.Sent
			total.Fenced += res.Fenced
		}
		res, err = r.Flush(ctx)
		require.NoError(t, err)
		total.Sent += res.Sent
		total.Fenced += res.Fenced

		requireOrderedOnce(t, rows, b.send.SentIDs())
		b.requireStatus(t, rows, outbox.StatusSent, "")
		require.Zero(t, total.Fenced, "no other instance took a claim")
		require.Equal(t, len(rows), total.Sent, "every acknowledged row counted as sent")
	})
}
