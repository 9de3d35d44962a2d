package inboxtest

import (
	"context"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/publish/inbox"
)

// Applier is an inbox.BatchHandler that goes through the inbox table, as
// the worker does (inbox.Process, inbox.ProcessBatch), with no work of its
// own: it counts, per event id, how often it was handed the event and how
// often the event was applied (committed with the outcome inbox.Applied).
type Applier struct {
	// DB holds the inbox table. Required.
	DB *gorm.DB
	// Consumer is the inbox's consumer name. Required.
	Consumer string
	// Crashed, if set, receives (without blocking) when a crashing call
	// has committed; see CrashAfterCommit.
	Crashed chan struct{}

	mu        sync.Mutex
	crash     bool
	delivered map[string]int
	applied   map[string]int
	crashed   []string
}

// CrashAfterCommit makes every later call, once its transaction committed,
// wait for its context to end and fail: a process that dies between its
// commit and its acknowledgement.
func (a *Applier) CrashAfterCommit(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.crash = on
}

// Handle records ev in the inbox unless it is there already.
func (a *Applier) Handle(ctx context.Context, ev inbox.Event) error {
	a.deliver(ev)
	outcome, err := inbox.Process(ctx, a.DB, a.Consumer, ev, time.Now(), func(*gorm.DB) error { return nil })
	if err != nil {
		return err
	}
	return a.committed(ctx, []inbox.Event{ev}, []inbox.Outcome{outcome})
}

// HandleBatch records the events of evs not in the inbox yet, in one
// transaction.
func (a *Applier) HandleBatch(ctx context.Context, evs []inbox.Event) ([]error, error) {
	a.deliver(evs...)
	outcomes, err := inbox.ProcessBatch(ctx, a.DB, a.Consumer, evs, time.Now(), func(*gorm.DB, []int) error { return nil })
	if err != nil {
		return nil, err
	}
	return make([]error, len(evs)), a.committed(ctx, evs, outcomes)
}

func (a *Applier) deliver(evs ...inbox.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.delivered == nil {
		a.delivered, a.applied = map[string]int{}, map[string]int{}
	}
	for _, ev := range evs {
		a.delivered[ev.EventID]++
	}
}

// committed counts the applied events of a committed call, and crashes when
// it should.
func (a *Applier) committed(ctx context.Context, evs []inbox.Event, outcomes []inbox.Outcome) error {
	a.mu.Lock()
	for i, o := range outcomes {
		if o == inbox.Applied {
			a.applied[evs[i].EventID]++
		}
	}
	crash := a.crash
	if crash {
		for _, ev := range evs {
			a.crashed = append(a.crashed, ev.EventID)
		}
	}
	a.mu.Unlock()
	if !crash {
		return nil
	}
	if a.Crashed != nil {
		select {
		case a.Crashed <- struct{}{}:
		default:
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// Delivered returns how often the event was handed to the Applier.
func (a *Applier) Delivered(eventID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.delivered[eventID]
}

// Applied returns how often the event was applied.
func (a *Applier) Applied(eventID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied[eventID]
}

// CrashedEvents returns the ids of the events committed by calls that then
// crashed, in order.
func (a *Applier) CrashedEvents() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.crashed...)
}
