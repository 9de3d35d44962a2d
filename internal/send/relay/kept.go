package relay

import (
	"context"
	"fmt"
	"slices"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// Flush writes the SENT of rows whose acknowledgement a full batch left for
// the next poll (see RunOnce), releases a batch claimed for the next poll
// and not sent (see Pump), releases rows whose release failed, and releases
// rows whose send got no answer (relay.UnansweredError) once it has settled,
// waiting for that until ctx ends (rows still unsettled then stay
// PROCESSING for stale recovery). The loop calls it when it stops (and,
// without the wait, when it pauses); it does nothing when nothing is
// left. On error the rows stay PROCESSING and
// are recovered after StaleAfter, and may then be sent a second time.
func (r *Relay) Flush(ctx context.Context) (Result, error) { return r.flushKept(ctx, true) }

// flushKept is Flush; without wait, rows whose unanswered send has not
// settled yet stay kept for a later poll instead of being waited for.
func (r *Relay) flushKept(ctx context.Context, wait bool) (Result, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	var res Result
	// A batch claimed for the next poll goes back unchanged: no attempt
	// spent, and the version bump fences nothing of ours.
	r.pending.keepToRelease(r.pending.takeNext().msgs...)
	// Rows whose send got no answer go back once their request is torn
	// down (within the sender's bound); those still not settled when ctx
	// ends stay PROCESSING for stale recovery.
	r.pending.settle(ctx, wait)
	if err := r.releaseKept(ctx, &res); err != nil {
		return res, err
	}
	acked, ackedAt := r.pending.takeAcks()
	if len(acked) == 0 {
		return res, nil
	}
	fenced, err := r.store.MarkSent(ctx, acked, ackedAt)
	if err != nil {
		r.pending.putBackAcks(acked, ackedAt)
		return res, fmt.Errorf("record deferred acknowledgements: %w", err)
	}
	res.Sent, res.Fenced = res.Sent+len(acked)-fenced, res.Fenced+fenced
	return res, nil
}

// releaseKept writes the rejections whose write failed in an earlier poll,
// hands back the rows whose release failed, and those whose unanswered
// send is now torn down, and then what a claim without an answer took.
// r.pollMu must be held.
func (r *Relay) releaseKept(ctx context.Context, res *Result) error {
	r.pending.settle(ctx, false)
	if failures := r.pending.takeFailures(); len(failures) > 0 {
		fenced, err := r.store.MarkFailed(ctx, failures)
		if err != nil {
			r.pending.keepFailures(failures...)
			return fmt.Errorf("record rejections kept from an outage: %w", err)
		}
		res.Fenced += fenced
	}
	if rows := r.pending.takeToRelease(); len(rows) > 0 {
		fenced, err := r.store.Release(ctx, rows)
		if err != nil {
			r.pending.keepToRelease(rows...)
			return fmt.Errorf("release rows kept from an outage: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(rows)-fenced, res.Fenced+fenced
	}
	return r.releaseLost(ctx, res)
}

// releaseLost releases the rows a claim without an answer took: those
// PROCESSING under this relay's owner that it holds in none of its lists.
// They were never sent, so they go back with no attempt spent, as at once
// as the database answers, not after the stale limit with one spent; the
// version bump fences nothing of ours. The owner carries this run's token,
// so the claims of an earlier run (a crash, which stale recovery counts)
// or of another process given the same InstanceID are not touched.
// r.pollMu must be held.
func (r *Relay) releaseLost(ctx context.Context, res *Result) error {
	if !r.pending.claimLost() {
		return nil
	}
	if acked, ackedAt := r.pending.takeAcks(); len(acked) > 0 {
		// The claim carried these acknowledgements: those its commit wrote
		// are sent, not fenced when written again.
		written, err := r.store.WrittenSent(ctx, acked)
		if err != nil {
			r.pending.putBackAcks(acked, ackedAt)
			return fmt.Errorf("read back a claim that got no answer: %w", err)
		}
		acked = slices.DeleteFunc(acked, func(m outbox.Message) bool { return written[m.ID] })
		res.Sent += len(written)
		r.pending.putBackAcks(acked, ackedAt)
	}
	rows, err := r.store.ClaimedBy(ctx, r.owner)
	if err != nil {
		return fmt.Errorf("read back a claim that got no answer: %w", err)
	}
	if lost := r.pending.lostRows(rows); len(lost) > 0 {
		fenced, err := r.store.Release(ctx, lost)
		if err != nil {
			return fmt.Errorf("release a claim that got no answer: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(lost)-fenced, res.Fenced+fenced
		res.Lost += len(lost) - fenced
	}
	r.pending.clearClaimLost()
	return nil
}

// hasNext reports whether a batch claimed during the last send waits to be sent.
func (r *Relay) hasNext() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return r.pending.hasNext()
}

// pendingAcks reports whether acknowledgements wait for their SENT write,
// or rows for their release.
func (r *Relay) pendingAcks() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return r.pending.needsWrite()
}
