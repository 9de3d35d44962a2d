package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/send/outbox"
)

// recordBatch records the results errs of the send of msgs, even when the
// relay is being stopped: the sends happened; more says that the loop polls
// again at once (see record). When the broker could not be reached, it hands
// back the batch claimed for the next poll too.
func (r *Relay) recordBatch(ctx context.Context, msgs []outbox.Message, errs []error, res Result, clock sharedClock, more bool) (Result, error) {
	// The sends happened: record them even if we are being stopped.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	res, err := r.record(wctx, msgs, errs, res, clock.now(), more)
	if !res.Unavailable || !r.pending.hasNext() {
		return res, err
	}
	// The broker is unreachable: hand the next batch back too rather
	// than hold it over the outage backoff.
	next := r.pending.takeNext().msgs
	fenced, rerr := r.store.Release(wctx, next)
	if rerr != nil {
		r.pending.keepToRelease(next...)
		rerr = fmt.Errorf("release the next batch: %w (%d rows kept to release at the next try)", rerr, len(next))
	} else {
		res.Released, res.Fenced = res.Released+len(next)-fenced, res.Fenced+fenced
	}
	return res, errors.Join(err, rerr)
}

// record writes the result of each row of msgs, sent at now: SENT (or
// deferred to the next claim, when the batch was full or more says that the
// next poll follows at once), RETRY or FAIL, released, or held while an
// unanswered send may still land; what it could not write it keeps in
// r.pending for the next try.
func (r *Relay) record(ctx context.Context, msgs []outbox.Message, errs []error, res Result, now time.Time, more bool) (Result, error) {
	var sent, released []outbox.Message
	var failures []outbox.Failure
	for i, m := range msgs {
		var unanswered *UnansweredError
		switch err := errs[i]; {
		case err == nil:
			sent = append(sent, m)
		case errors.As(err, &unanswered) && unanswered.Settled != nil:
			// It may still land: releasing it now would let another
			// instance send it and the next event of its post first.
			r.pending.holdUnanswered(m, unanswered.Settled)
			res.Held++
			res.Unavailable = true
		case errors.Is(err, ErrUnavailable):
			released = append(released, m)
		default:
			final := m.RetryCount >= *r.cfg.MaxRetries
			failures = append(failures, outbox.Failure{
				Message:       m,
				Err:           err.Error(),
				NextAttemptAt: now.Add(r.retryDelay(m.RetryCount + 1)),
				Final:         final,
			})
			if final {
				res.Failed++
			} else {
				res.Retried++
			}
		}
	}
	// Their posts' next events became heads after the last claim's read.
	r.ackedSinceClaim += len(sent)
	var errsOut []error
	switch {
	case len(sent) == 0:
	case (len(msgs) >= r.cfg.BatchSize || more) && len(released) == 0 && res.Held == 0 && r.store.DefersAcksToNextClaim():
		// A full batch, or rows committed since the claim (the loop was
		// woken): the next poll follows at once and writes these in its
		// claim transaction, one commit instead of two.
		// (pending holds acknowledgements already when a pipelined claim
		// failed.)
		r.pending.deferAcks(sent, now)
		res.Deferred = len(sent)
	default:
		fenced, err := r.store.MarkSent(ctx, sent, now)
		if err != nil {
			// Nothing was written (one transaction). Keep the
			// acknowledgements, as for a deferred write: the next poll (or
			// the flush before the loop pauses) writes them, instead of
			// stale recovery sending the rows again with an attempt spent
			// and holding their posts' next events for StaleAfter.
			r.pending.keepAcks(sent, now)
			errsOut = append(errsOut, fmt.Errorf("%w (%d acknowledgements kept for the next try)", err, len(sent)))
			break
		}
		res.Sent, res.Fenced = res.Sent+len(sent)-fenced, res.Fenced+fenced
	}
	if len(failures) > 0 {
		fenced, err := r.store.MarkFailed(ctx, failures)
		res.Fenced += fenced
		if err != nil {
			// Nothing was written (one transaction): write them at the next
			// poll or flush, each rejection one attempt.
			r.pending.keepFailures(failures...)
			err = fmt.Errorf("%w (%d rejections kept to write at the next try)", err, len(failures))
		}
		errsOut = append(errsOut, err)
	}
	if len(released) > 0 {
		fenced, err := r.store.Release(ctx, released)
		res.Fenced += fenced
		res.Unavailable = true
		if err != nil {
			// Nothing was written (one transaction): release them at the
			// next poll or flush instead of spending an attempt of each
			// through stale recovery.
			r.pending.keepToRelease(released...)
			err = fmt.Errorf("%w (%d rows kept to release at the next try)", err, len(released))
		} else {
			res.Released += len(released) - fenced
		}
		errsOut = append(errsOut, err)
	}
	if err := errors.Join(errsOut...); err != nil {
		// The rows stay PROCESSING: stale recovery retries them; the broker
		// may then see some twice, with the same event-id.
		return res, fmt.Errorf("record send results: %w", err)
	}
	return res, nil
}

// retryDelay is the wait before the given retry (1-based): RetryBase doubled
// per earlier retry, capped at RetryMax, then jittered into [d/2, d] so rows
// rejected together do not come back together.
func (r *Relay) retryDelay(retry int) time.Duration {
	return backoff.Jitter(backoff.Delay(r.cfg.RetryBase, r.cfg.RetryMax, retry-1))
}
