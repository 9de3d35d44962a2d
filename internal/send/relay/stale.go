package relay

import (
	"context"
	"fmt"
	"time"
)

// recoverStale hands back the claims of dead instances
// (outbox.Store.RecoverStale), after writing this relay's deferred
// acknowledgements, at most once per Interval. appNow is the relay's
// clock; claims are judged by the database's, read here.
func (r *Relay) recoverStale(ctx context.Context, appNow time.Time, res *Result) error {
	// Polls follow each other at once while full batches come; looking for
	// stale claims once per interval is enough (a claim is stale only after
	// StaleAfter, which is more than two intervals), and saves a read of
	// every PROCESSING row per batch.
	due := r.recoveredAt.IsZero() || appNow.Sub(r.recoveredAt) >= r.cfg.Interval || appNow.Before(r.recoveredAt)
	if !due {
		return nil
	}
	// Deferred acknowledgements first (one commit per interval): after
	// a database outage longer than StaleAfter their rows would look
	// stale, and this relay would recover, fence and resend its own
	// acknowledged rows.
	if acked, ackedAt := r.pending.takeAcks(); len(acked) > 0 {
		wctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
		fenced, err := r.store.MarkSent(wctx, acked, ackedAt)
		cancel()
		if err != nil {
			r.pending.putBackAcks(acked, ackedAt)
			return fmt.Errorf("record deferred acknowledgements: %w", err)
		}
		res.Sent, res.Fenced = res.Sent+len(acked)-fenced, res.Fenced+fenced
	}
	// After a failed poll (the database down, most likely) claims are
	// not judged until the database has answered for a stale limit: an
	// outage counts toward every claim's age, and the instance holding
	// one may be waiting to write its kept results, not dead.
	if !appNow.Before(r.troubleUntil) {
		now, err := r.store.Now(ctx)
		if err != nil {
			return err
		}
		rec, err := r.store.RecoverStale(ctx, now.Add(-r.cfg.StaleAfter), *r.cfg.MaxRetries, now.Add(r.cfg.RetryBase))
		if err != nil {
			return fmt.Errorf("recover stale claims: %w", err)
		}
		res.Recovered, res.RecoveredFailed = rec.Retried, rec.Failed
	}
	r.recoveredAt = appNow
	return nil
}
