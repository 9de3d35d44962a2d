// Package worker is the downstream consumer of posting-events: it publishes
// each reserved post at its scheduledAt, WORKING → PUBLISHED, and never
// twice.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Worker handles posting-events (it is an inbox.PartitionHandler for
// kafka.Consumer, and an inbox.Adopter for rabbitmq.Consumer) and
// publishes posts at their time.
type Worker struct {
	db  *gorm.DB
	cfg Config
	log *slog.Logger
	sem chan struct{} // one token per publisher call in progress

	// loads, claims and records batch the reads, the claims at the slot
	// and the PUBLISHED writes of the attempts running at the same time.
	loads   *group[int64, loaded]
	claims  *group[int64, claimRes]
	records *group[recordReq, recordRes]

	base   context.Context // ends at Stop: every timer's publication stops
	cancel context.CancelFunc

	// skew is the database's clock minus the worker's (nanoseconds), as
	// last read: timers are set on the worker's clock, shifted by it, so a
	// worker whose clock runs behind does not publish late by its lag.
	skew atomic.Int64

	mu    sync.Mutex
	armed map[int64]*timer // by post id
	// alarms are the clock timers of the armed publications, one per
	// scheduledAt (its UnixNano).
	alarms map[int64]*alarm
	owned  map[int32]struct{} // partitions assigned and not revoked
	// adoptTo is the partition Adopt last moved work to (adopting says
	// whether it was called): while the worker owns it, the sweep adopts
	// again what a Kafka worker still running recorded since.
	adoptTo  int32
	adopting bool
	stopped  bool
	// sweep is the sweep loop's lifecycle, started at the first assignment.
	sweep startstop.BaseStartStop
	// refusedLogged are the posts whose refused events were logged.
	refusedLogged postSet
}

// New returns a worker on db, which holds the posts, inbox and publications
// tables.
func New(db *gorm.DB, cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid worker config: %w", err)
	}
	base, cancel := context.WithCancel(context.Background())
	w := &Worker{db: db, cfg: cfg, log: cfg.Logger.With("component", "worker"),
		sem: make(chan struct{}, cfg.Concurrency), base: base, cancel: cancel,
		armed: map[int64]*timer{}, alarms: map[int64]*alarm{}, owned: map[int32]struct{}{}}
	w.newGroups()
	return w, nil
}

// Config returns the worker's configuration with defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Pending is how many publications have an armed timer or are in progress.
func (w *Worker) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.armed)
}

// Stop disarms every timer, ends the sweep and waits for the publications
// in progress to stop; later events arm nothing. It is safe to call twice.
func (w *Worker) Stop() {
	w.mu.Lock()
	w.stopped = true
	ids := make([]int64, 0, len(w.armed))
	for id := range w.armed {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	w.cancel()
	w.disarm(ids...)
	w.sweep.Stop()
}

// dbNow reads the database's clock and notes how far it is from the
// worker's, for the timers armed next.
func (w *Worker) dbNow(ctx context.Context) (time.Time, error) {
	now, err := database.Now(ctx, w.db)
	if err != nil {
		return now, err
	}
	w.skew.Store(int64(now.Sub(w.cfg.Now())))
	return now, nil
}
