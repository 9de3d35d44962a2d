package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// consumerTestHandler records the events it is given; failFirst makes the
// first n calls for an event id fail.
type consumerTestHandler struct {
	mu        sync.Mutex
	events    []inbox.Event
	calls     map[string]int
	failFirst map[string]int
	assigned  [][]int32
	revoked   [][]int32
}

func (h *consumerTestHandler) Handle(_ context.Context, ev inbox.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[string]int{}
	}
	h.calls[ev.EventID]++
	if h.calls[ev.EventID] <= h.failFirst[ev.EventID] {
		return errors.New("consumer test: database down")
	}
	h.events = append(h.events, ev)
	return nil
}

func (h *consumerTestHandler) Assigned(_ context.Context, _ string, parts []int32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.assigned = append(h.assigned, parts)
	return nil
}

func (h *consumerTestHandler) Revoked(_ string, parts []int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.revoked = append(h.revoked, parts)
}

func (h *consumerTestHandler) snapshot() []inbox.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]inbox.Event(nil), h.events...)
}

// consumerTestRecord is a well-formed message of the contract.
func consumerTestRecord(n int, postID int64) kafkatest.Record {
	id := fmt.Sprintf("00000000-0000-7000-8000-%012d", n)
	value := fmt.Sprintf(`{"eventId":%q,"eventType":"POSTING_EVENT","postId":%d,"occurredAt":"2026-12-03T10:00:00Z","ownerId":"","action":"CREATED","status":"RESERVED","scheduledAt":"2026-12-03T11:00:00Z"}`, id, postID)
	return kafkatest.Record{Key: strconv.FormatInt(postID, 10), Value: []byte(value),
		Headers: map[string]string{event.HeaderEventID: id, event.HeaderEventType: string(event.PostingEvent)}}
}

func consumerTestStart(t *testing.T, addr, group string, h inbox.Handler, observe func(string, string)) *Consumer {
	t.Helper()
	c, err := NewConsumer(ConsumerConfig{Brokers: []string{addr}, GroupID: group, CommitInterval: 50 * time.Millisecond,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Observe: observe}, h, nil)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c
}

// A malformed message between two good ones of the same post is skipped and
// counted; both good ones are handled, in order, with their coordinates; a
// handler failure gets the same event again instead of skipping it.
func TestConsumerSkipsMalformedAndRetriesFailures(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	first, second := consumerTestRecord(1, 7), consumerTestRecord(2, 7)
	b.Produce(t, first,
		kafkatest.Record{Key: "7", Value: []byte("{not json"), Headers: map[string]string{
			event.HeaderEventID: "bad", event.HeaderEventType: string(event.PostingEvent)}},
		kafkatest.Record{Key: "7", Value: first.Value}, // no headers
		second)

	h := &consumerTestHandler{failFirst: map[string]int{second.Headers[event.HeaderEventID]: 2}}
	var mu sync.Mutex
	outcomes := map[string]int{}
	consumerTestStart(t, b.Addr, "consumer-test-skip", h, func(_, outcome string) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[outcome]++
	})
	require.Eventually(t, func() bool { return len(h.snapshot()) == 2 }, 20*time.Second, 20*time.Millisecond)
	evs := h.snapshot()
	require.Equal(t, first.Headers[event.HeaderEventID], evs[0].EventID)
	require.Equal(t, second.Headers[event.HeaderEventID], evs[1].EventID)
	require.Equal(t, int64(0), evs[0].Offset)
	require.Equal(t, int64(3), evs[1].Offset)
	require.Equal(t, kafkatest.PartitionFor("7", b.Partitions), evs[1].Partition)
	require.EqualValues(t, 7, evs[1].PostID)
	h.mu.Lock()
	require.Equal(t, 3, h.calls[evs[1].EventID], "two failures, then handled")
	h.mu.Unlock()
	mu.Lock()
	require.Equal(t, map[string]int{"malformed": 2, "error": 2}, outcomes)
	mu.Unlock()
}

// Offsets are committed once handled: a second consumer of the group, after
// the first stopped, starts after what the first handled, and the handler
// hears of its partitions being assigned and revoked.
func TestConsumerResumesFromCommittedOffsets(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 2))
	var recs []kafkatest.Record
	for i := range 20 {
		recs = append(recs, consumerTestRecord(i, int64(i%5+1)))
	}
	b.Produce(t, recs[:10]...)
	h1 := &consumerTestHandler{}
	c1 := consumerTestStart(t, b.Addr, "consumer-test-resume", h1, nil)
	require.Eventually(t, func() bool { return len(h1.snapshot()) == 10 }, 20*time.Second, 20*time.Millisecond)
	c1.Stop()
	h1.mu.Lock()
	require.Len(t, h1.assigned, 1)
	require.ElementsMatch(t, []int32{0, 1}, h1.assigned[0])
	require.Equal(t, h1.assigned, h1.revoked)
	h1.mu.Unlock()

	b.Produce(t, recs[10:]...)
	h2 := &consumerTestHandler{}
	consumerTestStart(t, b.Addr, "consumer-test-resume", h2, nil)
	require.Eventually(t, func() bool { return len(h2.snapshot()) == 10 }, 20*time.Second, 20*time.Millisecond)
	seen := map[string]bool{}
	for _, ev := range h2.snapshot() {
		seen[ev.EventID] = true
	}
	for _, r := range recs[10:] {
		require.True(t, seen[r.Headers[event.HeaderEventID]], "event %s", r.Headers[event.HeaderEventID])
	}
	// A sentinel per partition: a partition is read in offset order, so
	// anything handled before comes again, if at all, before its sentinel.
	var sentinels []kafkatest.Record
	for post := int64(100); len(sentinels) < int(b.Partitions); post++ {
		if kafkatest.PartitionFor(strconv.FormatInt(post, 10), b.Partitions) == int32(len(sentinels)) {
			sentinels = append(sentinels, consumerTestRecord(100+len(sentinels), post))
		}
	}
	b.Produce(t, sentinels...)
	require.Eventually(t, func() bool {
		got := 0
		for _, ev := range h2.snapshot() {
			for _, r := range sentinels {
				if ev.EventID == r.Headers[event.HeaderEventID] {
					got++
				}
			}
		}
		return got == len(sentinels)
	}, 20*time.Second, 20*time.Millisecond)
	require.Len(t, h2.snapshot(), 12, "events handled by the first consumer came again")
}

func TestConsumerConfigValidation(t *testing.T) {
	t.Parallel()
	h := &consumerTestHandler{}
	for _, cfg := range []ConsumerConfig{
		{},
		{Brokers: []string{"nohostport"}},
		{Brokers: []string{"127.0.0.1:1"}, SessionTimeout: time.Millisecond},
		{Brokers: []string{"127.0.0.1:1"}, RetryBase: time.Second, RetryMax: time.Millisecond},
		{Brokers: []string{"127.0.0.1:1"}, KafkaVersion: "0.9.0.0"},
	} {
		_, err := NewConsumer(cfg, h, nil)
		require.ErrorContains(t, err, "invalid kafka consumer config", "%+v", cfg)
	}
	_, err := NewConsumer(ConsumerConfig{Brokers: []string{"127.0.0.1:1"}}, nil, nil)
	require.Error(t, err)
}
