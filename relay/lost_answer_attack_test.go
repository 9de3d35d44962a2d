package relay

import (
	"context"
	"database/sql/driver"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// shortSender hands every message to the broker but, on its first call,
// answers one result fewer than it was given: the relay cannot tell which
// message the missing answer belongs to, so it records nothing and leaves
// the batch to stale recovery (the stale limit keeps a resend behind any
// copy still on its way).
type shortSender struct {
	*relaytest.Sender
	broke atomic.Bool
}

func (s *shortSender) Send(ctx context.Context, msgs []outbox.Message) []error {
	errs := s.Sender.Send(ctx, msgs)
	if len(errs) > 0 && s.broke.CompareAndSwap(false, true) {
		return errs[:len(errs)-1]
	}
	return errs
}

// failNextClaim makes the next claim of r fail as a dropped connection
// does, nothing committed.
func failNextClaim(r *Relay) *atomic.Bool {
	var failed atomic.Bool
	r.claimAnswer = func(msgs []outbox.Message, err error) ([]outbox.Message, error) {
		if err == nil && failed.CompareAndSwap(false, true) {
			return nil, driver.ErrBadConn
		}
		return msgs, err
	}
	return &failed
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
		send := &shortSender{Sender: b.send}
		rows := b.append(t, 1, 2)
		r, err := New(b.store, send, b.relay(t, "a").Config())
		require.NoError(t, err)

		_, err = r.RunOnce(ctx)
		require.ErrorContains(t, err, "sender returned 1 results for 2 messages")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs())

		// A database blip fails the next claim; nothing was committed.
		failed := failNextClaim(r)
		_, err = r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.True(t, failed.Load())

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Released, "the unrecorded send was released")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs(), "sent again before the stale limit")
		for _, m := range rows {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status, "row %d left to stale recovery", m.ID)
		}
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
		send := &shortSender{Sender: b.send}
		rows := b.append(t, 1, 2, 3, 4)
		r, err := New(b.store, send, b.relay(t, "a", func(c *Config) { c.BatchSize = 2 }).Config())
		require.NoError(t, err)
		// The first claim (before the send) succeeds, the one of the
		// next batch (during the send) fails.
		var claims atomic.Int32
		r.claimAnswer = func(msgs []outbox.Message, err error) ([]outbox.Message, error) {
			if claims.Add(1) == 2 && err == nil {
				return nil, driver.ErrBadConn
			}
			return msgs, err
		}

		_, err = r.Pump(ctx)
		require.ErrorContains(t, err, "sender returned 1 results for 2 messages")
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs())

		// The lost claim had taken rows 3 and 4: those, and only those,
		// go back.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Released, "the unrecorded send was released with the lost claim's rows")
		for _, m := range rows[:2] {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status, "row %d left to stale recovery", m.ID)
		}
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
		var claims atomic.Int32
		r.claimAnswer = func(msgs []outbox.Message, err error) ([]outbox.Message, error) {
			if claims.Add(1) == 2 && err == nil {
				return nil, driver.ErrBadConn // committed: the acknowledgements and the next batch
			}
			return msgs, err
		}

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
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status)
		}
		require.Zero(t, total.Fenced, "no other instance took a claim")
		require.Equal(t, len(rows), total.Sent, "every acknowledged row counted as sent")
	})
}
