package kafka

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/inbox/inboxtest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// consumerTestHandler records the events it is given and the partitions it
// is told of.
type consumerTestHandler struct {
	mu       sync.Mutex
	events   []inbox.Event
	assigned [][]int32
	revoked  [][]int32
}

func (h *consumerTestHandler) Handle(_ context.Context, ev inbox.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
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

// consumerTestRecord is the suite's well-formed message n of post postID.
func consumerTestRecord(n int, postID int64) kafkatest.Record {
	m := inboxtest.WellFormed(n, postID)
	return kafkatest.Record{Key: m.Key, Value: m.Value, Headers: m.Headers}
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

// The consumer passes the suite every broker's consumer passes, on a topic
// of one partition: the messages published are read in their order.
func TestConsumerPassesTheConsumerSuite(t *testing.T) {
	t.Parallel()
	inboxtest.RunConsumerSuite(t, func(t *testing.T) *inboxtest.ConsumerBroker {
		b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 1))
		return &inboxtest.ConsumerBroker{
			Topic: b.Topic,
			Publish: func(t *testing.T, msgs ...inboxtest.Message) {
				recs := make([]kafkatest.Record, len(msgs))
				for i, m := range msgs {
					recs[i] = kafkatest.Record{Key: m.Key, Value: m.Value, Headers: m.Headers}
				}
				b.Produce(t, recs...)
			},
			Start: func(t *testing.T, h inbox.Handler, observe func(string, string)) func() {
				return consumerTestStart(t, b.Addr, "consumer-suite", h, observe).Stop
			},
			Offset: func(n int) int64 { return int64(n) },
		}
	})
}

// Offsets are committed once handled, on a topic of several partitions: a
// second consumer of the group, after the first stopped, starts after what
// the first handled, each event carries the partition its key put it in, and
// the handler hears of its partitions being assigned and revoked.
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
		require.Equal(t, kafkatest.PartitionFor(strconv.FormatInt(ev.PostID, 10), b.Partitions), ev.Partition,
			"event %s read where its key put it", ev.EventID)
		require.Equal(t, b.Topic, ev.Topic)
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

// A second consumer joins while the first is in the middle of a batch it
// committed and has not marked (a rebalance before the mark): the batch is
// abandoned, delivered again to whichever member then owns its partition,
// and found in the inbox; every event of the two partitions is applied
// once, none lost.
func TestConsumerRebalanceMidBatchAppliesEveryEventOnce(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 2))
	db := databasetest.NewSQLite(t)
	var recs []kafkatest.Record
	var ids []string
	for i := range 60 {
		r := consumerTestRecord(i, int64(i%6+1))
		recs, ids = append(recs, r), append(ids, r.Headers[event.HeaderEventID])
	}
	b.Produce(t, recs...)

	first := &inboxtest.Applier{DB: db.DB, Consumer: "rebalance", Crashed: make(chan struct{}, 1)}
	first.CrashAfterCommit(true)
	consumerTestStart(t, b.Addr, "consumer-test-rebalance", first, nil)
	select {
	case <-first.Crashed:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer committed nothing")
	}
	first.CrashAfterCommit(false) // the batch in hand stays stuck until the rebalance
	crashed := first.CrashedEvents()
	require.NotEmpty(t, crashed)
	second := &inboxtest.Applier{DB: db.DB, Consumer: "rebalance"}
	consumerTestStart(t, b.Addr, "consumer-test-rebalance", second, nil)

	require.Eventually(t, func() bool {
		for _, id := range ids {
			if first.Applied(id)+second.Applied(id) == 0 {
				return false
			}
		}
		for _, id := range crashed {
			if first.Delivered(id)+second.Delivered(id) < 2 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "every event applied, the abandoned batch delivered again")
	for _, id := range ids {
		require.Equal(t, 1, first.Applied(id)+second.Applied(id), "event %s applied", id)
	}
	var rows int64
	require.NoError(t, db.DB.Model(&inbox.Record{}).Where("consumer = ?", "rebalance").Count(&rows).Error)
	require.EqualValues(t, len(ids), rows)
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
