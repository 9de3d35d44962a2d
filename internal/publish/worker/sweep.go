package worker

import (
	"context"
	"maps"
	"slices"

	"github.com/postingsvc/posting/internal/platform/backoff"
)

// startSweep starts the sweep loop once, at the first assignment: a worker
// that owns no partition has nothing to sweep. w.mu must be held.
func (w *Worker) startSweep() {
	if w.stopped {
		return
	}
	// An error means it started at an earlier assignment.
	_ = w.sweep.StartLoop(w.base, "sweep", w.sweepLoop)
}

// sweepLoop runs Sweep every SweepInterval until Stop.
func (w *Worker) sweepLoop(ctx context.Context) {
	for backoff.Sleep(ctx, w.cfg.SweepInterval) {
		n, err := w.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("sweep for pending publications failed; trying again at the next sweep", "err", err)
		case n > 0:
			w.log.Info("pending publications armed by the sweep", "armed", n)
		}
	}
}

// Sweep arms every PENDING publication of the partitions the worker owns
// that has no timer, and returns how many it armed. Timers are armed when an
// event is handled or a partition assigned; a row set back to PENDING in the
// database by an operator (a retry of a FAILED publication) has neither, and
// the sweep is what finds it. A worker that adopted (see Adopt) adopts again
// first while it owns the partition it adopted to.
func (w *Worker) Sweep(ctx context.Context) (int, error) {
	w.mu.Lock()
	partitions := slices.Sorted(maps.Keys(w.owned))
	_, owned := w.owned[w.adoptTo]
	adopt, to := w.adopting && owned, w.adoptTo
	w.mu.Unlock()
	if adopt {
		// A Kafka worker that was not stopped before the switch to
		// RabbitMQ may have recorded publications under its partitions
		// since: once it stops, nobody else would arm them.
		n, err := w.adopt(ctx, to)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			w.log.Info("adopted pending work of other partitions", "partition", to, "adopted", n)
		}
	}
	return w.armPending(ctx, partitions)
}
