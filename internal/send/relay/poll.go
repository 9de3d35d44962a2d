package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// RunOnce does one poll: recover stale claims (at most once per Interval),
// claim a batch, send it, and record each result under the claim's version.
// When ctx ends between claim and send the rows stay PROCESSING, as after a
// crash, and are recovered after StaleAfter; once sent, results are recorded
// even if ctx ends meanwhile.
//
// On MySQL and PostgreSQL, when the batch was full and every row was
// acknowledged or rejected, the SENT write of the acknowledged rows is
// deferred to the next poll, which does it with its claim (in the claim's
// transaction on MySQL; see outbox.Store.MarkSentAndClaim) (Result.Deferred). The loop polls again at once after any poll that sent
// rows, defers their acknowledgements whether the batch was full or not,
// and writes what is left when it pauses or stops. A caller that drives RunOnce itself must call Flush
// when it is done.
func (r *Relay) RunOnce(ctx context.Context) (res Result, err error) {
	return r.poll(ctx, pollMode{})
}

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
// releases a batch claimed and not sent, and writes the acknowledgements of
// a batch that is not full that Pump deferred because a wake (Wake) came
// during its send: the loop takes that wake and polls again at once.
func (r *Relay) Pump(ctx context.Context) (Result, error) {
	return r.poll(ctx, pollMode{pipelined: true})
}

// pollMode says how a poll is driven.
type pollMode struct {
	// pipelined: a full batch's send overlaps the claim of the next (Pump).
	pipelined bool
	// expect: rows are known to be waiting, so the claim goes straight to
	// its transaction (outbox.Store.ExpectingRows).
	expect bool
	// followed: the caller polls again at once after a poll that sent rows
	// (the loop), so their acknowledgements are left to that poll's claim.
	followed bool
}

// poll is one cycle of the relay: write what earlier polls kept, look for
// stale claims, claim a batch, send it, and record each result, as mode
// says (pollMode).
func (r *Relay) poll(ctx context.Context, mode pollMode) (res Result, err error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	// Two clocks: the app's decides when this relay looks again; the
	// database's (shared by every instance) is what claims, retries and
	// stale recovery are written and compared in. A poll that claims its
	// batch reads the database's clock only inside the claim's
	// transaction, which stamps the rows; what the poll writes after the
	// send is timed from that stamp (toSend.clock).
	appNow := r.cfg.Now()
	defer func() {
		if err != nil && ctx.Err() == nil {
			r.troubleUntil = appNow.Add(r.cfg.StaleAfter)
		}
	}()
	if err := r.releaseKept(ctx, &res); err != nil {
		return res, err
	}
	if err := r.recoverStale(ctx, appNow, &res); err != nil {
		return res, err
	}

	claimStart := time.Now()
	b, err := r.claimBatch(ctx, mode.expect, &res)
	msgs := b.msgs
	if err != nil || len(msgs) == 0 {
		return res, err
	}
	ctx, poll := r.tracePoll(ctx, claimStart, msgs)
	defer func() { endSpan(poll, err) }()
	r.hooks.claimed()
	if err := ctx.Err(); err != nil {
		// Kept for Flush, which releases them; after a crash, stale recovery.
		r.pending.setNext(b)
		return res, fmt.Errorf("stopped between claim and send, %d rows not sent: %w", len(msgs), err)
	}

	errs, claimErr := r.sendBatch(ctx, msgs, mode.pipelined, &res)
	if len(errs) != len(msgs) {
		// A broken sender: treat the outcome as unknown and let stale recovery retry.
		r.pending.leaveUnrecorded(msgs...)
		return res, errors.Join(fmt.Errorf("sender returned %d results for %d messages", len(errs), len(msgs)), claimErr)
	}
	// The next poll follows at once when the caller says so (the loop,
	// after any poll that sent rows), and when a wake waits (rows were
	// committed meanwhile, and the loop takes the wake): that claim can
	// write this batch's acknowledgements.
	more := mode.followed || (mode.pipelined && len(r.wake) > 0)
	res, err = r.recordBatch(ctx, msgs, errs, res, b.clock, more)
	return res, errors.Join(err, claimErr)
}

// sendBatch sends msgs and returns one result per message (see Sender).
// With pipelined, a full batch means more rows are likely waiting: it
// claims the next batch (and writes the acknowledgements deferred so far)
// while this one is sent, and keeps it for the next poll; claimErr is why
// that claim failed. Its rule skips every post with a row of this batch in
// the air, so no event overtakes an earlier one of its post.
func (r *Relay) sendBatch(ctx context.Context, msgs []outbox.Message, pipelined bool, res *Result) (errs []error, claimErr error) {
	if !pipelined || len(msgs) < r.cfg.BatchSize {
		return r.traceSend(ctx, msgs), nil
	}
	acked, ackedAt := r.pending.takeAcks()
	nextc := make(chan claimed, 1)
	began := time.Now()
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
	go func() { nextc <- r.claim(cctx, acked, ackedAt, true) }()
	errs = r.traceSend(ctx, msgs)
	c := <-nextc
	// As for a claim before a send: when it failed, the acknowledgements
	// are kept, and what the claim may have taken is read back.
	if err := r.tookClaim(c, res); err != nil {
		return errs, fmt.Errorf("claim the next batch: %w", err)
	}
	r.pending.setNext(c.toSend(began))
	return errs, nil
}

// toSend is a claimed batch on its way to the broker: its rows, when its
// claim began (by this process's monotonic clock), and the database's clock
// as of its claim.
type toSend struct {
	msgs  []outbox.Message
	began time.Time
	clock sharedClock
}

// sharedClock is the database's time as a claim stamped it (or, for a batch
// kept for the next poll, as that poll read it when later), moved on by this
// process's monotonic clock from that answer: what a poll writes after its
// send (sent_at, a retry's next_attempt_at) needs no read of the database's
// clock of its own, no wall clock enters, and it is never earlier than the
// rows' claimed_at.
type sharedClock struct {
	at    time.Time // the database's time of the stamp or the later read
	since time.Time // this process's time when the database answered, with its monotonic reading
}

func (c sharedClock) now() time.Time { return c.at.Add(time.Since(c.since)) }
