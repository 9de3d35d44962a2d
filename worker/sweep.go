package worker

import (
	"context"
	"maps"
	"slices"
)

// startSweep starts the sweep loop once, at the first assignment: a worker
// that owns no partition has nothing to sweep. w.mu must be held.
func (w *Worker) startSweep() {
	if w.stopped || w.sweepDone != nil {
		return
	}
	w.sweepDone = make(chan struct{})
	go w.sweepLoop()
}

// sweepLoop runs Sweep every SweepInterval until Stop.
func (w *Worker) sweepLoop() {
	defer close(w.sweepDone)
	for sleep(w.base, w.cfg.SweepInterval) {
		n, err := w.Sweep(w.base)
		switch {
		case err != nil && w.base.Err() == nil:
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
// the sweep is what finds it.
func (w *Worker) Sweep(ctx context.Context) (int, error) {
	w.mu.Lock()
	partitions := slices.Sorted(maps.Keys(w.owned))
	w.mu.Unlock()
	return w.armPending(ctx, partitions)
}
