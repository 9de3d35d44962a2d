package relay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/postingsvc/posting/outbox"
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
	r.unreleased, r.next = append(r.unreleased, r.next...), nil
	// Rows whose send got no answer go back once their request is torn
	// down (within the sender's bound); those still not settled when ctx
	// ends stay PROCESSING for stale recovery.
	r.settle(ctx, wait)
	if err := r.releaseKept(ctx, &res); err != nil {
		return res, err
	}
	if len(r.acked) == 0 {
		return res, nil
	}
	fenced, err := r.store.MarkSent(ctx, r.acked, r.ackedAt)
	if err != nil {
		return res, fmt.Errorf("record deferred acknowledgements: %w", err)
	}
	res.Sent, res.Fenced = len(r.acked)-fenced, fenced
	r.acked, r.ackedAt = nil, time.Time{}
	return res, nil
}

// unsettledRow is a row whose send ended without an answer, and the
// channel its sender closes once that request can no longer land.
type unsettledRow struct {
	msg     outbox.Message
	settled <-chan struct{}
}

// settle moves the unsettled rows whose request is torn down to unreleased;
// with wait, it first waits for each until ctx ends. r.pollMu must be held.
func (r *Relay) settle(ctx context.Context, wait bool) {
	kept := r.unsettled[:0]
	for _, u := range r.unsettled {
		if wait {
			select {
			case <-u.settled:
			case <-ctx.Done():
			}
		}
		select {
		case <-u.settled:
			r.unreleased = append(r.unreleased, u.msg)
		default:
			kept = append(kept, u)
		}
	}
	clear(r.unsettled[len(kept):])
	r.unsettled = kept
}

// releaseKept writes the rejections whose write failed in an earlier poll,
// hands back the rows whose release failed, and those whose unanswered
// send is now torn down, and then what a claim without an answer took.
// r.pollMu must be held.
func (r *Relay) releaseKept(ctx context.Context, res *Result) error {
	r.settle(ctx, false)
	if len(r.unfailed) > 0 {
		fenced, err := r.store.MarkFailed(ctx, r.unfailed)
		if err != nil {
			return fmt.Errorf("record rejections kept from an outage: %w", err)
		}
		res.Fenced += fenced
		r.unfailed = nil
	}
	if len(r.unreleased) > 0 {
		fenced, err := r.store.Release(ctx, r.unreleased)
		if err != nil {
			return fmt.Errorf("release rows kept from an outage: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(r.unreleased)-fenced, res.Fenced+fenced
		r.unreleased = nil
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
	if !r.lostClaim {
		return nil
	}
	if len(r.acked) > 0 {
		// The claim carried these acknowledgements: those its commit wrote
		// are sent, not fenced when written again.
		written, err := r.store.WrittenSent(ctx, r.acked)
		if err != nil {
			return fmt.Errorf("read back a claim that got no answer: %w", err)
		}
		r.acked = slices.DeleteFunc(r.acked, func(m outbox.Message) bool { return written[m.ID] })
		res.Sent += len(written)
		if len(r.acked) == 0 {
			r.ackedAt = time.Time{}
		}
	}
	rows, err := r.store.ClaimedBy(ctx, r.owner)
	if err != nil {
		return fmt.Errorf("read back a claim that got no answer: %w", err)
	}
	held := map[int64]bool{}
	for _, m := range slices.Concat(r.acked, r.next, r.unreleased) {
		held[m.ID] = true
	}
	for _, u := range r.unsettled {
		held[u.msg.ID] = true
	}
	for _, f := range r.unfailed {
		held[f.Message.ID] = true
	}
	// An unrecorded send stays held while its row is PROCESSING at the
	// version of that claim; once stale recovery (or anything else) has
	// moved it on, it is forgotten.
	version := make(map[int64]int64, len(rows))
	for _, m := range rows {
		version[m.ID] = m.Version
	}
	r.unrecorded = slices.DeleteFunc(r.unrecorded, func(m outbox.Message) bool {
		v, ok := version[m.ID]
		return !ok || v != m.Version
	})
	for _, m := range r.unrecorded {
		held[m.ID] = true
	}
	lost := slices.DeleteFunc(rows, func(m outbox.Message) bool { return held[m.ID] })
	if len(lost) > 0 {
		fenced, err := r.store.Release(ctx, lost)
		if err != nil {
			return fmt.Errorf("release a claim that got no answer: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(lost)-fenced, res.Fenced+fenced
		res.Lost += len(lost) - fenced
	}
	r.lostClaim = false
	return nil
}

// hasNext reports whether a batch claimed during the last send waits to be sent.
func (r *Relay) hasNext() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return len(r.next) > 0
}

// pendingAcks reports whether acknowledgements wait for their SENT write,
// or rows for their release.
func (r *Relay) pendingAcks() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return len(r.acked) > 0 || len(r.unreleased) > 0 || len(r.next) > 0 || len(r.unsettled) > 0 ||
		len(r.unfailed) > 0 || r.lostClaim
}
