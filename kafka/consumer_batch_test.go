package kafka

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/inbox/inboxtest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

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

	dying := &inboxtest.Recorder{Block: true, Entered: make(chan struct{}, 1)}
	c1 := consumerTestStart(t, b.Addr, group, dying, nil)
	select {
	case <-dying.Entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no batch reached the handler")
	}
	c1.Stop() // dies before the batch commits

	var mu sync.Mutex
	malformed := 0
	h := &inboxtest.Recorder{}
	c2 := consumerTestStart(t, b.Addr, group, h, func(_, outcome string) {
		if outcome == "malformed" {
			mu.Lock()
			malformed++
			mu.Unlock()
		}
	})
	require.Eventually(t, func() bool { return len(h.EventIDs()) >= n }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, want, h.EventIDs(), "every event again, once, in offset order")
	sizes := h.Sizes()
	require.NotEmpty(t, sizes, "no batch")
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
	next := &inboxtest.Recorder{}
	consumerTestStart(t, b.Addr, group, next, nil)
	require.Eventually(t, func() bool { return len(next.EventIDs()) >= 1 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{sentinel.Headers[event.HeaderEventID]}, next.EventIDs(),
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
	h := &inboxtest.Recorder{FailBatches: 1 << 30, FailFirst: map[string]int{want[len(want)-1]: 1}} // the last one fails once more on its own
	b.Produce(t, recs...)
	consumerTestStart(t, b.Addr, "consumer-test-batch-fail", h, nil)
	require.Eventually(t, func() bool { return len(h.EventIDs()) >= len(want) }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, want, h.EventIDs())
	require.Equal(t, 2, h.Calls(want[len(want)-1]), "the last event was retried on its own")
}
