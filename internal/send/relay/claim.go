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
// acknowledgements; with expect, without a look for a due row first (see
// claim).
func (r *Relay) claimBatch(ctx context.Context, expect bool, res *Result) (toSend, error) {
	// A batch a pipelined poll claimed during the previous send goes
	// first, once the database has answered this poll (a read of its
	// clock): nothing is sent while the database is away, where its results
	// could not be written, and the batch's age counts the wait for that
	// answer.
	next := r.pending.takeNext()
	if len(next.msgs) > 0 {
		now, err := r.store.Now(ctx)
		if err != nil {
			r.pending.setNext(next)
			return toSend{}, err
		}
		if time.Since(next.began) <= r.maxNextAge() {
			// What the poll writes after the send is timed by that answer
			// when the database's clock moved on more than the batch's
			// (a failover to a server ahead, a suspended host): a retry's
			// backoff counts from the database's time, as claims compare
			// it. Never earlier than the claim's stamp.
			if next.clock.now().Before(now) {
				next.clock = sharedClock{at: now, since: time.Now()}
			}
			return next, nil
		}
		// The send before took long, or the database answered slowly:
		// sending this batch now could outlast the stale limit and meet
		// another instance's recovery of it. Hand it back (no attempt
		// spent) and claim afresh.
		fenced, err := r.store.Release(ctx, next.msgs)
		if err != nil {
			r.pending.setNext(next)
			return toSend{}, fmt.Errorf("release a batch claimed too long ago: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(next.msgs)-fenced, res.Fenced+fenced
	}
	// A zero time: the claim is stamped by the database's clock inside its
	// transaction, not with now, which the work above (or a wait for a
	// lock) may have made old enough to look stale to other instances.
	acked, ackedAt := r.pending.takeAcks()
	if len(acked) > 0 {
		// The acknowledgements are written by this claim, so it gets the
		// bound their own write would have had: a database that hangs
		// must not hold sent rows PROCESSING toward the stale limit.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.WriteTimeout)
		defer cancel()
	}
	began := time.Now()
	c := r.claim(ctx, acked, ackedAt, expect)
	if err := r.tookClaim(c, res); err != nil {
		return toSend{}, fmt.Errorf("claim: %w", err)
	}
	return c.toSend(began), nil
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
	// answered is when the claim returned, by this process's clock.
	answered time.Time
}

// toSend is the batch c took, its claim begun at began. Its clock starts
// from the stamp of its rows (claimed_at, the database's time inside the
// claim's transaction) at the claim's answer, which came after the stamp.
func (c claimed) toSend(began time.Time) toSend {
	b := toSend{msgs: c.msgs, began: began}
	if len(c.msgs) > 0 && c.msgs[0].ClaimedAt != nil {
		b.clock = sharedClock{at: *c.msgs[0].ClaimedAt, since: c.answered}
	}
	return b
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
// With expect (the relay was woken by a commit, or its batch came back
// full) rows are waiting, and the claim skips the look for a due row that
// spares an idle poll a write transaction: one round trip less between a
// commit and its send.
func (r *Relay) claim(ctx context.Context, acked []outbox.Message, ackedAt time.Time, expect bool) claimed {
	size := r.batch.size()
	store := r.store
	if expect {
		store = store.ExpectingRows()
	}
	msgs, fenced, err := store.MarkSentAndClaim(ctx, acked, ackedAt, r.owner, size, time.Time{})
	answered := time.Now()
	msgs, err = r.hooks.answer(msgs, err)
	if err == nil {
		r.batch.observe(size, len(msgs))
	}
	return claimed{msgs: msgs, fenced: fenced, err: err, acked: acked, ackedAt: ackedAt, answered: answered}
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
	// The claim read its candidates after every acknowledgement counted so
	// far was written (or in the transaction that wrote them): it saw
	// their posts' next events.
	r.ackedSinceClaim = 0
	return nil
}
