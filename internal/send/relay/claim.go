package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// claimBatch returns the batch this poll sends: the one a pipelined poll
// claimed during the previous send, unless it waited too long, or else a
// batch claimed now, in the transaction that writes the deferred
// acknowledgements, stamped by clock; with expect, without a look for a
// due row first (see claim).
func (r *Relay) claimBatch(ctx context.Context, clock sharedClock, expect bool, res *Result) ([]outbox.Message, error) {
	// A batch a pipelined poll claimed during the previous send goes first.
	msgs, claimedAt := r.pending.takeNext()
	if len(msgs) > 0 && time.Since(claimedAt) <= r.maxNextAge() {
		return msgs, nil
	}
	if len(msgs) > 0 {
		// The send before took long: sending this batch now could outlast
		// the stale limit and meet another instance's recovery of it. Hand
		// it back (no attempt spent) and claim afresh.
		fenced, err := r.store.Release(ctx, msgs)
		if err != nil {
			r.pending.putBackNext(msgs)
			return nil, fmt.Errorf("release a batch claimed too long ago: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(msgs)-fenced, res.Fenced+fenced
	}
	acked, ackedAt := r.pending.takeAcks()
	if len(acked) > 0 {
		// The acknowledgements are written by this claim, so it gets the
		// bound their own write would have had: a database that hangs
		// must not hold sent rows PROCESSING toward the stale limit.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.WriteTimeout)
		defer cancel()
	}
	c := r.claim(ctx, acked, ackedAt, clock, expect)
	if err := r.tookClaim(c, res); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return c.msgs, nil
}

// claimed is the outcome of a claim (claim): before a send, or beside one.
type claimed struct {
	msgs   []outbox.Message
	fenced int
	err    error
	// acked and ackedAt are the deferred acknowledgements the claim
	// wrote, or kept when it failed.
	acked   []outbox.Message
	ackedAt time.Time
}

// maxNextAge is how old a batch claimed for the next poll may be when that
// poll starts its send: a tenth of StaleAfter. New makes StaleAfter exceed
// (send bound + WriteTimeout) * 5/4, so the age plus a whole send and write
// stays below nine tenths of it, and no other instance takes a live claim
// for stale. (Sequential polls start the send right after the claim.)
func (r *Relay) maxNextAge() time.Duration { return r.cfg.StaleAfter / 10 }

// claim writes the deferred acknowledgements acked and claims a batch, in
// one transaction (outbox.Store.MarkSentAndClaim). It touches no field of
// r, so a pipelined poll runs it beside a send.
//
// The database's clock is not read again for it: the claim is stamped, and
// due rows are told, by the poll's reading moved on by this process's
// monotonic clock (clock), taken where a read would have been, inside the
// claim's transaction, so that neither the work before it nor a wait for a
// connection or for SQLite's write lock makes the claim look older to other
// instances than it is. Reading the clock once a poll instead of up to
// three times (the poll, the read that spares an idle poll a write
// transaction, and the claim's transaction) takes up to two round trips
// off the way from a commit to its send. With expect (the relay was woken
// by a commit, or its batch came back full) rows are waiting, and the claim
// skips the look for a due row that spares an idle poll a write
// transaction: one more round trip.
func (r *Relay) claim(ctx context.Context, acked []outbox.Message, ackedAt time.Time, clock sharedClock, expect bool) claimed {
	size := r.batch.size()
	store := r.store.WithClock(clock.now)
	if expect {
		store = store.ExpectingRows()
	}
	msgs, fenced, err := store.MarkSentAndClaim(ctx, acked, ackedAt, r.owner, size, time.Time{})
	msgs, err = r.hooks.answer(msgs, err)
	if err == nil {
		r.batch.observe(size, len(msgs))
	}
	return claimed{msgs: msgs, fenced: fenced, err: err, acked: acked, ackedAt: ackedAt}
}

// tookClaim counts what the claim c wrote and took. When it failed,
// nothing was written, or the answer of a commit was lost: the
// acknowledgements it carried wait for the next try (a second write of
// them is fenced), and so does the read-back of the claim.
func (r *Relay) tookClaim(c claimed, res *Result) error {
	if c.err != nil {
		r.pending.putBackAcks(c.acked, c.ackedAt)
		r.pending.markClaimLost()
		return c.err
	}
	res.Sent, res.Fenced = res.Sent+len(c.acked)-c.fenced, res.Fenced+c.fenced
	res.Claimed += len(c.msgs)
	return nil
}
