package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postingsvc/posting/outbox"
)

// RunOnce does one poll: recover stale claims (at most once per Interval),
// claim a batch, send it, and record each result under the claim's version.
// When ctx ends between claim and send the rows stay PROCESSING, as after a
// crash, and are recovered after StaleAfter; once sent, results are recorded
// even if ctx ends meanwhile.
//
// On MySQL, when the batch was full and every row was acknowledged or
// rejected, the SENT write of the acknowledged rows is deferred to the next
// poll, which does it in the transaction of its claim (Result.Deferred); the
// loop polls again at once after a full batch, and writes what is left when
// it pauses or stops. A caller that drives RunOnce itself must call Flush
// when it is done.
func (r *Relay) RunOnce(ctx context.Context) (res Result, err error) { return r.poll(ctx, false) }

// Pump is RunOnce pipelined, as the relay's loop polls: when the batch it
// sends is full (more rows are likely waiting), it claims the next batch
// while this one is being sent, and keeps it for the next poll, which sends
// it first. The claim and the send overlap instead of following each other,
// so the database and the broker work at the same time. The guarantees are
// RunOnce's: the next batch is claimed under the same rule, which never
// takes an event of a post while an earlier one is PROCESSING (the batch in
// the air), so per-post order holds; a crash leaves both batches PROCESSING
// for stale recovery; an unreachable broker releases both. Result.Claimed
// counts the rows claimed during the poll, the next batch's included. A
// caller that drives Pump itself must call Flush when it is done, which
// releases a batch claimed and not sent.
func (r *Relay) Pump(ctx context.Context) (Result, error) { return r.poll(ctx, true) }

// claimed is the outcome of claiming the next batch during a send.
type claimed struct {
	msgs   []outbox.Message
	fenced int
	err    error
	// acked and ackedAt are the deferred acknowledgements the claim
	// wrote, or kept when it failed.
	acked   []outbox.Message
	ackedAt time.Time
}

func (r *Relay) poll(ctx context.Context, pipelined bool) (res Result, err error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	// Two clocks: the app's decides when this relay looks again; the
	// database's (shared by every instance) is what claims, retries and
	// stale recovery are written and compared in.
	appNow := r.cfg.Now()
	defer func() {
		if err != nil && ctx.Err() == nil {
			r.troubleUntil = appNow.Add(r.cfg.StaleAfter)
		}
	}()
	now, err := r.store.Now(ctx)
	if err != nil {
		return res, err
	}
	clock := newSharedClock(now)
	if err := r.releaseKept(ctx, &res); err != nil {
		return res, err
	}
	// Polls follow each other at once while full batches come; looking for
	// stale claims once per interval is enough (a claim is stale only after
	// StaleAfter, which is more than two intervals), and saves a read of
	// every PROCESSING row per batch.
	if r.recoveredAt.IsZero() || appNow.Sub(r.recoveredAt) >= r.cfg.Interval || appNow.Before(r.recoveredAt) {
		// Deferred acknowledgements first (one commit per interval): after
		// a database outage longer than StaleAfter their rows would look
		// stale, and this relay would recover, fence and resend its own
		// acknowledged rows.
		if acked, ackedAt := r.pending.takeAcks(); len(acked) > 0 {
			fenced, err := r.store.MarkSent(ctx, acked, ackedAt)
			if err != nil {
				r.pending.putBackAcks(acked, ackedAt)
				return res, fmt.Errorf("record deferred acknowledgements: %w", err)
			}
			res.Sent, res.Fenced = len(acked)-fenced, fenced
		}
		// After a failed poll (the database down, most likely) claims are
		// not judged until the database has answered for a stale limit: an
		// outage counts toward every claim's age, and the instance holding
		// one may be waiting to write its kept results, not dead.
		if !appNow.Before(r.troubleUntil) {
			rec, err := r.store.RecoverStale(ctx, now.Add(-r.cfg.StaleAfter), *r.cfg.MaxRetries, now.Add(r.cfg.RetryBase))
			if err != nil {
				return res, fmt.Errorf("recover stale claims: %w", err)
			}
			res.Recovered, res.RecoveredFailed = rec.Retried, rec.Failed
		}
		r.recoveredAt = appNow
	}

	claimStart := time.Now()
	// A batch a pipelined poll claimed during the previous send goes first.
	msgs, claimedAt := r.pending.takeNext()
	if len(msgs) > 0 && time.Since(claimedAt) > r.maxNextAge() {
		// The send before took long: sending this batch now could outlast
		// the stale limit and meet another instance's recovery of it. Hand
		// it back (no attempt spent) and claim afresh.
		fenced, err := r.store.Release(ctx, msgs)
		if err != nil {
			r.pending.putBackNext(msgs)
			return res, fmt.Errorf("release a batch claimed too long ago: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(msgs)-fenced, res.Fenced+fenced
		msgs = nil
	}
	if len(msgs) == 0 {
		// A zero time: the claim is stamped by the database's clock inside its
		// transaction, not with now, which the work above (or a wait for a
		// lock) may have made old enough to look stale to other instances.
		acked, ackedAt := r.pending.takeAcks()
		c := r.claim(ctx, acked, ackedAt)
		if c.err != nil {
			// Nothing was written, or the answer of a commit was lost: the
			// acknowledgements wait for the next try (a second write of
			// them is fenced), and so does the read-back of the claim.
			r.pending.putBackAcks(c.acked, c.ackedAt)
			r.pending.markClaimLost()
			return res, fmt.Errorf("claim: %w", c.err)
		}
		res.Sent, res.Fenced = res.Sent+len(c.acked)-c.fenced, res.Fenced+c.fenced
		res.Claimed = len(c.msgs)
		msgs = c.msgs
	}
	if len(msgs) == 0 {
		return res, nil
	}
	ctx, poll := r.tracePoll(ctx, claimStart, msgs)
	defer func() { endSpan(poll, err) }()
	r.hooks.claimed()
	if err := ctx.Err(); err != nil {
		// Kept for Flush, which releases them; after a crash, stale recovery.
		r.pending.putBackNext(msgs)
		return res, fmt.Errorf("stopped between claim and send, %d rows not sent: %w", len(msgs), err)
	}

	// A full batch: more rows are likely waiting. Claim the next batch (and
	// write the acknowledgements deferred so far) while this one is sent.
	// Its rule skips every post with a row of this batch in the air, so no
	// event overtakes an earlier one of its post.
	var nextc chan claimed
	var nextAt time.Time
	if pipelined && len(msgs) >= r.cfg.BatchSize {
		acked, ackedAt := r.pending.takeAcks()
		nextc = make(chan claimed, 1)
		nextAt = time.Now()
		// This batch's results are written only once the claim has
		// returned, so a claim stuck on the database (a lock wait, a
		// dropped connection not timed out yet) would hold this batch
		// PROCESSING past the stale limit, for another instance to send
		// again. A batch claimed later than maxNextAge would be released
		// unsent anyway: give up the claim then. (Should its commit be cut
		// off, its rows stay PROCESSING for stale recovery, as after a
		// crash.)
		cctx, cancel := context.WithTimeout(ctx, r.maxNextAge())
		defer cancel()
		go func() { nextc <- r.claim(cctx, acked, ackedAt) }()
	}
	errs := r.traceSend(ctx, msgs)
	var claimErr error
	if nextc != nil {
		c := <-nextc
		if c.err != nil {
			// As for a claim before a send: keep the acknowledgements, and
			// read back what the claim may have taken.
			r.pending.putBackAcks(c.acked, c.ackedAt)
			r.pending.markClaimLost()
			claimErr = fmt.Errorf("claim the next batch: %w", c.err)
		} else {
			res.Sent, res.Fenced = res.Sent+len(c.acked)-c.fenced, res.Fenced+c.fenced
			res.Claimed += len(c.msgs)
			r.pending.setNext(c.msgs, nextAt)
		}
	}
	if len(errs) != len(msgs) {
		// A broken sender: treat the outcome as unknown and let stale recovery retry.
		r.pending.leaveUnrecorded(msgs...)
		return res, errors.Join(fmt.Errorf("sender returned %d results for %d messages", len(errs), len(msgs)), claimErr)
	}
	// The sends happened: record them even if we are being stopped.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	res, err = r.record(wctx, msgs, errs, res, clock.now())
	if res.Unavailable && r.pending.hasNext() {
		// The broker is unreachable: hand the next batch back too rather
		// than hold it over the outage backoff.
		next, _ := r.pending.takeNext()
		fenced, rerr := r.store.Release(wctx, next)
		if rerr != nil {
			r.pending.keepToRelease(next...)
			rerr = fmt.Errorf("release the next batch: %w (%d rows kept to release at the next try)", rerr, len(next))
		} else {
			res.Released, res.Fenced = res.Released+len(next)-fenced, res.Fenced+fenced
		}
		err = errors.Join(err, rerr)
	}
	return res, errors.Join(err, claimErr)
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
func (r *Relay) claim(ctx context.Context, acked []outbox.Message, ackedAt time.Time) claimed {
	size := r.batch.size()
	msgs, fenced, err := r.store.MarkSentAndClaim(ctx, acked, ackedAt, r.owner, size, time.Time{})
	msgs, err = r.hooks.answer(msgs, err)
	if err == nil {
		r.batch.observe(size, len(msgs))
	}
	return claimed{msgs: msgs, fenced: fenced, err: err, acked: acked, ackedAt: ackedAt}
}

// sharedClock is the database's time read at the start of a poll, moved on
// by this process's monotonic clock: later times of the poll (sent_at, a
// retry's next_attempt_at) need no second read, and no wall clock enters.
type sharedClock struct {
	at    time.Time // the database's time when read
	since time.Time // this process's time then, with its monotonic reading
}

func newSharedClock(at time.Time) sharedClock { return sharedClock{at: at, since: time.Now()} }

func (c sharedClock) now() time.Time { return c.at.Add(time.Since(c.since)) }
