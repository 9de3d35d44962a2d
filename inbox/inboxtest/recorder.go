// Package inboxtest has an inbox.BatchHandler for the consumers' tests.
package inboxtest

import (
	"context"
	"errors"
	"sync"

	"github.com/postingsvc/posting/inbox"
)

// ErrDown is what Recorder returns for a call it fails.
var ErrDown = errors.New("inboxtest: database down")

// Recorder is an inbox.BatchHandler that records the events it is handed,
// in order, and the size of every batch. Set its fields before a consumer
// uses it.
type Recorder struct {
	// Block makes every call wait for its context to end and fail: a
	// process that dies before its commit.
	Block bool
	// Entered, if set, receives (without blocking) when a call starts.
	Entered chan struct{}
	// FailBatches is how many HandleBatch calls fail first.
	FailBatches int
	// FailFirst makes the first n Handle calls of an event id fail.
	FailFirst map[string]int

	mu     sync.Mutex
	events []inbox.Event
	sizes  []int
	calls  map[string]int
}

// Handle records ev, unless it fails first or blocks.
func (r *Recorder) Handle(ctx context.Context, ev inbox.Event) error {
	if err := r.enter(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[ev.EventID]++
	if r.calls[ev.EventID] <= r.FailFirst[ev.EventID] {
		return ErrDown
	}
	r.events = append(r.events, ev)
	return nil
}

// HandleBatch records evs, unless the batch fails first or blocks.
func (r *Recorder) HandleBatch(ctx context.Context, evs []inbox.Event) ([]error, error) {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(evs))
	fail := r.FailBatches > 0
	r.FailBatches--
	r.mu.Unlock()
	if err := r.enter(ctx); err != nil {
		return nil, err
	}
	if fail {
		return nil, ErrDown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, evs...)
	return make([]error, len(evs)), nil
}

func (r *Recorder) enter(ctx context.Context) error {
	if r.Entered != nil {
		select {
		case r.Entered <- struct{}{}:
		default:
		}
	}
	if r.Block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// EventIDs returns the ids of the events recorded, in order.
func (r *Recorder) EventIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, len(r.events))
	for i, ev := range r.events {
		ids[i] = ev.EventID
	}
	return ids
}

// Sizes returns the size of every batch handed to HandleBatch.
func (r *Recorder) Sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.sizes...)
}

// Calls returns how often Handle was called for the event id.
func (r *Recorder) Calls(eventID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[eventID]
}
