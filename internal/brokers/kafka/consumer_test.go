package kafka

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/inbox/inboxtest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
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

// consumerTestRecords is n well-formed records of posts 1..posts in turn.
func consumerTestRecords(n, posts int) []kafkatest.Record {
	var recs []kafkatest.Record
	for i := range n {
		recs = append(recs, consumerTestRecord(i, int64(i%posts+1)))
	}
	return recs
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
	recs := consumerTestRecords(20, 5)
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

// rejoinTestLog records the consumer's warnings of failed joins with their
// pause (retry_in) and the time they were logged.
type rejoinTestLog struct {
	mu    sync.Mutex
	lines []rejoinTestLine
	// consumerErrors are the times of "consumer error" warnings.
	consumerErrors []time.Time
}

type rejoinTestLine struct {
	at      time.Time
	msg     string
	retryIn time.Duration
	brokers string
}

func (l *rejoinTestLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *rejoinTestLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *rejoinTestLog) WithGroup(string) slog.Handler            { return l }
func (l *rejoinTestLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	if r.Message == "consumer error" {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.consumerErrors = append(l.consumerErrors, time.Now())
		return nil
	}
	line := rejoinTestLine{at: time.Now(), msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "retry_in", "pause":
			line.retryIn = a.Value.Duration()
		case "brokers":
			line.brokers = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

func (l *rejoinTestLog) snapshot() []rejoinTestLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rejoinTestLine(nil), l.lines...)
}

// With no broker listening, failed joins are logged with the brokers waited
// for and a pause that doubles (jittered into its upper half) instead of
// several times a second; when the broker appears the consumer joins and
// reads, and once a session was set up the next failure waits the base
// pause again.
func TestConsumerRejoinPauseGrowsWhileBrokersAreDown(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	b.Stop() // the port is known and refuses connections
	const base, maxPause = 250 * time.Millisecond, 2 * time.Second

	log := &rejoinTestLog{}
	h := &consumerTestHandler{}
	c, err := NewConsumer(ConsumerConfig{Brokers: []string{b.Addr}, GroupID: "consumer-test-rejoin",
		CommitInterval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		RejoinBase: base, RejoinMax: maxPause}, h, slog.New(log))
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)

	// 6 failures: pauses of 250ms, 500ms, 1s, then the 2s cap, each
	// jittered into [d/2, d].
	const failures = 6
	require.Eventually(t, func() bool { return len(log.snapshot()) >= failures }, time.Minute, 10*time.Millisecond)
	lines := log.snapshot()
	var minTotal time.Duration
	for i, line := range lines[:failures] {
		nominal := min(base<<i, maxPause)
		require.GreaterOrEqual(t, line.retryIn, nominal/2, "failure %d: %s", i+1, line.msg)
		require.LessOrEqual(t, line.retryIn, nominal, "failure %d: %s", i+1, line.msg)
		require.Equal(t, b.Addr, line.brokers)
		require.Contains(t, line.msg, b.Addr, "the message names the brokers it waits for")
		require.Contains(t, line.msg, "retrying in "+line.retryIn.String())
		if i < failures-1 {
			minTotal += line.retryIn
		}
	}
	t.Logf("%d failed joins logged in %s", failures, lines[failures-1].at.Sub(lines[0].at).Round(time.Millisecond))
	// The pauses really were waited: a slow machine only makes this longer.
	require.GreaterOrEqual(t, lines[failures-1].at.Sub(lines[0].at), minTotal,
		"%d failed joins logged in %s", failures, lines[failures-1].at.Sub(lines[0].at))
	require.Empty(t, h.snapshot())

	// The broker appears: the consumer joins within a capped pause and reads.
	b.Restart(t)
	rec := consumerTestRecord(1, 7)
	b.Produce(t, rec)
	require.Eventually(t, func() bool { return len(h.snapshot()) == 1 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, rec.Headers["event-id"], h.snapshot()[0].EventID)

	// A session was set up: the next outage starts from the base pause.
	before := len(log.snapshot())
	b.Stop()
	require.Eventually(t, func() bool { return len(log.snapshot()) > before }, time.Minute, 10*time.Millisecond)
	first := log.snapshot()[before]
	require.LessOrEqual(t, first.retryIn, base, "the pause was reset by the session: %s", first.msg)

	// Meanwhile every partition's consumer failed again and again; they
	// warned at most once a second.
	log.mu.Lock()
	warnings := append([]time.Time(nil), log.consumerErrors...)
	log.mu.Unlock()
	if len(warnings) > 1 {
		span := warnings[len(warnings)-1].Sub(warnings[0])
		require.LessOrEqual(t, len(warnings), 1+int(span/consumerErrorWarnEvery),
			"%d consumer error warnings in %s", len(warnings), span)
	}
}
