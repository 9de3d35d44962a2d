package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
)

// flush writes deferred acknowledgements for the loop, even when ctx has
// ended: the sends happened.
func (r *Relay) flush(ctx context.Context, log *slog.Logger, final bool) {
	if !r.pendingAcks() {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := r.flushKept(fctx, final)
	if r.cfg.Observe != nil {
		r.cfg.Observe(res, time.Since(start), err)
	}
	switch {
	case err != nil:
		log.Error("recording acknowledged rows failed; stale recovery will send them again", "err", err)
	case res.Fenced > 0:
		log.Warn("late results refused: another instance had recovered the claim", "fenced", res.Fenced)
	}
	logLost(log, res)
}

// logLost says when a claim without an answer was found and handed back.
func logLost(log *slog.Logger, res Result) {
	if res.Lost > 0 {
		log.Warn("a claim got no answer (connection lost during its commit); its rows were handed back unsent, no attempt spent",
			"released", res.Lost)
	}
}

func (r *Relay) loop(ctx, stop context.Context) {
	// The instance id is on every line already when the logger comes from
	// serve; the relay's own id is what matters for claims.
	log := r.cfg.Logger.With("component", "relay", "claim_owner", r.owner)
	log.Info("relay started", "interval", r.cfg.Interval, "batch_size", r.cfg.BatchSize, "max_batch_size", r.cfg.MaxBatchSize,
		"max_retries", *r.cfg.MaxRetries, "stale_after", r.cfg.StaleAfter)
	defer log.Info("relay stopped")
	// A full batch leaves its acknowledgements to the next poll: write them
	// before the loop ends, whether by Stop or by ctx.
	defer r.flush(ctx, log, true)
	outage := backoff.Backoff{Base: r.cfg.Interval, Max: r.cfg.OutageBackoffMax, Exact: true}
	// expect: rows are known to be waiting (this process's commit, a full
	// batch), so the poll's claim skips its look for a due row
	// (outbox.Store.ExpectingRows).
	expect := false
	for {
		start := time.Now()
		res, err := r.poll(ctx, pollMode{pipelined: true, expect: expect, followed: true})
		expect = false
		if r.cfg.Observe != nil {
			r.cfg.Observe(res, time.Since(start), err)
		}
		wait := r.cfg.Interval
		switch {
		case err != nil && ctx.Err() != nil:
			log.Warn("relay poll interrupted", "err", err)
			return
		case err != nil:
			log.Error("relay poll failed", "err", err, "claimed", res.Claimed)
		case res.Unavailable:
			wait = outage.Next()
			log.Warn("broker unreachable, backing off without spending retries",
				"released", res.Released, "sent", res.Sent, "backoff", wait)
		default:
			outage.Reset()
			if res.Claimed > 0 || res.Recovered > 0 || res.RecoveredFailed > 0 {
				log.Debug("relay poll", "claimed", res.Claimed, "sent", res.Sent, "deferred", res.Deferred, "retried", res.Retried,
					"failed", res.Failed, "recovered", res.Recovered, "fenced", res.Fenced)
			}
			if res.Failed > 0 || res.RecoveredFailed > 0 {
				log.Warn("events failed for good; an operator must requeue them",
					"failed", res.Failed+res.RecoveredFailed)
			}
			if res.Fenced > 0 {
				log.Warn("late results refused: another instance had recovered the claim", "fenced", res.Fenced)
			}
			logLost(log, res)
			switch {
			case res.Claimed >= r.cfg.BatchSize || r.hasNext():
				// A full batch, or one claimed for the next poll: more are
				// waiting.
				wait, expect = 0, true
			case r.woken():
				// Rows committed since this poll's claim: by this process,
				// waiting; by another instance, most often its own relay's.
				wait, expect = 0, r.tookOwnWake()
			case r.acked():
				// The next event of a post becomes claimable only once the
				// one just sent is SENT, and its commit's wake may have been
				// spent on this poll already: look again at once. The
				// acknowledgements left to this poll's claim cost no
				// transaction of their own. (Rows the broker acknowledged,
				// whoever claimed them: a batch claimed beside the send
				// before is sent by a poll that claims nothing itself, and
				// the rows acknowledged by the poll before it still wait
				// for a claim when that batch is rejected whole. Rejected
				// rows free no successor.)
				wait = 0
			}
		}
		if wait == 0 {
			if !backoff.Sleep(stop, 0) {
				return
			}
			continue
		}
		// Nothing is deferred over a pause (after an error or an outage).
		r.flush(ctx, log, false)
		if pinger, ok := r.send.(Pinger); ok && res.Unavailable {
			if !r.waitOutage(ctx, stop, wait, pinger, log) {
				return
			}
			continue
		}
		woken, ok := backoff.SleepOrWoken(stop, wait, r.wake)
		if !ok {
			return
		}
		expect = woken && r.tookOwnWake()
	}
}

// woken takes a wake that came during the poll: rows were committed since
// its claim, and the loop polls again at once without a pause (so whatever
// the poll deferred is written by the next claim, not flushed alone).
func (r *Relay) woken() bool {
	select {
	case <-r.wake:
		return true
	default:
		return false
	}
}

// acked reports whether the broker acknowledged rows since the last claim
// read its candidates (Relay.ackedSinceClaim).
func (r *Relay) acked() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return r.ackedSinceClaim > 0
}

// waitOutage waits out an outage backoff, asking pinger every Interval
// whether the broker answers again; it returns early when it does, and
// false when the relay is stopped meanwhile.
func (r *Relay) waitOutage(ctx, stop context.Context, wait time.Duration, pinger Pinger, log *slog.Logger) bool {
	deadline := time.Now().Add(wait)
	for {
		step := min(r.cfg.Interval, time.Until(deadline))
		if step <= 0 {
			return true
		}
		if !backoff.Sleep(stop, step) {
			return false
		}
		if time.Until(deadline) <= 0 {
			return true
		}
		pctx, cancel := context.WithTimeout(ctx, max(r.cfg.Interval, time.Second))
		err := pinger.Ping(pctx)
		cancel()
		if err == nil {
			log.Info("broker reachable again; polling before the backoff ends", "backoff_left", time.Until(deadline).Round(time.Millisecond))
			return true
		}
	}
}
