// Package inboxtest has what the consumers' tests share: handlers that
// record what they are handed (Recorder; Applier, which goes through the
// inbox), the contract's messages, and RunConsumerSuite, the behaviour every
// broker's consumer must have.
package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/postingsvc/posting/internal/publish/inbox"
)

// ErrDown is what Recorder returns for a call it fails.
var ErrDown = errors.New("inboxtest: database down")

// Recorder is an inbox.BatchHandler (and inbox.PartitionHandler) that
// records the events it is handed, in order, the size of every batch, and
// the partitions assigned and revoked. Set its fields before a consumer
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
	// Malformed names the event ids the handler finds malformed (their
	// fields, say): it reports them wrapping inbox.ErrMalformed and does
	// not record them.
	Malformed map[string]bool

	mu       sync.Mutex
	events   []inbox.Event
	sizes    []int
	calls    map[string]int
	assigned [][]int32
	revoked  [][]int32
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
	if r.Malformed[ev.EventID] {
		return fmt.Errorf("%w: inboxtest: event %s", inbox.ErrMalformed, ev.EventID)
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
	malformed := make([]error, len(evs))
	for i, ev := range evs {
		if r.Malformed[ev.EventID] {
			malformed[i] = fmt.Errorf("%w: inboxtest: event %s", inbox.ErrMalformed, ev.EventID)
			continue
		}
		r.events = append(r.events, ev)
	}
	return malformed, nil
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

// Assigned records the partitions.
func (r *Recorder) Assigned(_ context.Context, _ string, partitions []int32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.assigned = append(r.assigned, append([]int32(nil), partitions...))
	return nil
}

// Revoked records the partitions.
func (r *Recorder) Revoked(_ string, partitions []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revoked = append(r.revoked, append([]int32(nil), partitions...))
}

// Events returns the events recorded, in order.
func (r *Recorder) Events() []inbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]inbox.Event(nil), r.events...)
}

// Partitions returns the partitions of every Assigned and Revoked call, in
// order.
func (r *Recorder) Partitions() (assigned, revoked [][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int32(nil), r.assigned...), append([][]int32(nil), r.revoked...)
}
