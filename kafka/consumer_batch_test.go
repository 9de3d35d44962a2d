package kafka

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// batchTestHandler is a consumerTestHandler that also takes batches: it
// records each batch's size; with block set, a batch (or a single event)
// waits for the session to end (the process dies before its commit); with failBatches, that many
// batches fail first (the consumer then handles their events one at a time).
type batchTestHandler struct {
	consumerTestHandler
	block       bool
	failBatches int
	entered     chan struct{} // receives when a batch starts, if set
	bmu         sync.Mutex
	sizes       []int
}

func (h *batchTestHandler) HandleBatch(ctx context.Context, evs []inbox.Event) ([]error, error) {
	h.bmu.Lock()
	h.sizes = append(h.sizes, len(evs))
	fail := h.failBatches > 0
	h.failBatches--
	h.bmu.Unlock()
	if h.entered != nil {
		select {
		case h.entered <- struct{}{}:
		default:
		}
	}
	if h.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if fail {
		return nil, errors.New("batch test: database down")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, evs...)
	return make([]error, len(evs)), nil
}

func (h *batchTestHandler) Handle(ctx context.Context, ev inbox.Event) error {
	if h.block {
		_, err := h.HandleBatch(ctx, []inbox.Event{ev})
		return err
	}
	return h.consumerTestHandler.Handle(ctx, ev)
}

func (h *batchTestHandler) batchSizes() []int {
	h.bmu.Lock()
	defer h.bmu.Unlock()
	return append([]int(nil), h.sizes...)
}

func eventIDs(evs []inbox.Event) []string {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.EventID
	}
	return ids
}

// The messages waiting in a partition go to the handler as batches, in
// offset order; a consumer that dies while a batch is being handled (before
// its commit) has marked nothing of it, so the next member gets the whole
// batch again; once a batch was handled its offsets are committed, and a
// later member starts after it. A malformed message inside a batch is
// skipped and counted.
func TestConsumerCommitsABatchOnlyAfterTheHandlerCommitted(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 1))
	const n = 200
	var recs []kafkatest.Record
	var want []string
	for i := range n {
		r := consumerTestRecord(i, int64(i%7+1))
		recs = append(recs, r)
		want = append(want, r.Headers[event.HeaderEventID])
		if i == n/2 {
			recs = append(recs, kafkatest.Record{Key: "3", Value: []byte("{not json"), Headers: r.Headers})
		}
	}
	b.Produce(t, recs...)
	const group = "consumer-test-batch"

	dying := &batchTestHandler{block: true, entered: make(chan struct{}, 1)}
	c1 := consumerTestStart(t, b.Addr, group, dying, nil)
	select {
	case <-dying.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no batch reached the handler")
	}
	c1.Stop() // dies before the batch commits

	var mu sync.Mutex
	malformed := 0
	h := &batchTestHandler{}
	c2 := consumerTestStart(t, b.Addr, group, h, func(_, outcome string) {
		if outcome == "malformed" {
			mu.Lock()
			malformed++
			mu.Unlock()
		}
	})
	require.Eventually(t, func() bool { return len(h.snapshot()) >= n }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, want, eventIDs(h.snapshot()), "every event again, once, in offset order")
	sizes := h.batchSizes()
	require.Less(t, len(sizes), n, "the waiting messages came in batches: %v", sizes)
	for _, s := range sizes {
		require.LessOrEqual(t, s, inbox.MaxBatch)
	}
	mu.Lock()
	require.Equal(t, 1, malformed)
	mu.Unlock()
	c2.Stop()

	sentinel := consumerTestRecord(n+1, 3)
	b.Produce(t, sentinel)
	next := &batchTestHandler{}
	consumerTestStart(t, b.Addr, group, next, nil)
	require.Eventually(t, func() bool { return len(next.snapshot()) >= 1 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{sentinel.Headers[event.HeaderEventID]}, eventIDs(next.snapshot()),
		"the handled batches' offsets were committed")
}

// Batches the handler fails are handled again one event at a time, in order,
// each retried until it is settled: no event is skipped or doubled.
func TestConsumerHandlesAFailedBatchOneAtATime(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 1))
	var recs []kafkatest.Record
	var want []string
	for i := range 50 {
		r := consumerTestRecord(i, int64(i%3+1))
		recs = append(recs, r)
		want = append(want, r.Headers[event.HeaderEventID])
	}
	h := &batchTestHandler{failBatches: 1 << 30}
	h.failFirst = map[string]int{want[len(want)-1]: 1} // the last one fails once more on its own
	b.Produce(t, recs...)
	consumerTestStart(t, b.Addr, "consumer-test-batch-fail", h, nil)
	require.Eventually(t, func() bool { return len(h.snapshot()) >= len(want) }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, want, eventIDs(h.snapshot()))
	h.mu.Lock()
	require.Equal(t, 2, h.calls[want[len(want)-1]], "the last event was retried on its own")
	h.mu.Unlock()
}
