package inboxtest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// suiteWait bounds every wait of the suite for a consumer.
const suiteWait = 30 * time.Second

// Message is a message as a producer puts it on a broker.
type Message struct {
	Key     string
	Headers map[string]string
	Value   []byte
}

// EventID is the message's event-id header.
func (m Message) EventID() string { return m.Headers[event.HeaderEventID] }

// WellFormed returns the n-th (0 to 10^12-1) well-formed message of the
// contract, a POSTING_EVENT of post postID; its event id is made of n.
func WellFormed(n int, postID int64) Message {
	id := fmt.Sprintf("00000000-0000-7000-8000-%012d", n)
	value := fmt.Sprintf(`{"eventId":%q,"eventType":"POSTING_EVENT","postId":%d,"occurredAt":"2026-12-03T10:00:00Z","ownerId":"","action":"CREATED","status":"RESERVED","scheduledAt":"2026-12-03T11:00:00Z"}`, id, postID)
	return Message{Key: strconv.FormatInt(postID, 10), Value: []byte(value),
		Headers: map[string]string{event.HeaderEventID: id, event.HeaderEventType: string(event.PostingEvent)}}
}

// ConsumerBroker is one broker's fresh topic (or queue), empty, with one
// consumer group, for RunConsumerSuite.
type ConsumerBroker struct {
	// Topic is what the consumed events name as their Topic.
	Topic string
	// Publish puts msgs on the topic. Every message published is read in
	// the order it was published (one partition).
	Publish func(t *testing.T, msgs ...Message)
	// Start starts a consumer of the group that feeds h and tells observe
	// its outcomes ("malformed", "error"; observe may be nil). The consumer
	// stops when t ends, or earlier with stop, which returns once it has
	// stopped (the work it did not acknowledge is delivered again); stop is
	// safe twice.
	Start func(t *testing.T, h inbox.Handler, observe func(eventType, outcome string)) (stop func())
	// Offset, if set, is the offset the n-th message published (from 0,
	// over every Publish) is read at; the suite then checks the events'.
	Offset func(n int) int64
	// Dead, if set, waits for n messages in the place the broker keeps the
	// malformed ones (a dead-letter queue), returns their values, and fails
	// t if more are there.
	Dead func(t *testing.T, n int) [][]byte
}

// RunConsumerSuite runs the cases every broker's consumer must pass, each
// on a ConsumerBroker of its own from newBroker: malformed messages are
// skipped and counted and the next one is handled, a failing event is
// retried without moving past it, a failed batch is handled again one event
// at a time, nothing is acknowledged before the handler committed (a crash
// before it loses nothing), a message delivered twice is applied once, and
// a second consumer takes over after the first stops with nothing lost or
// handled twice. The cases run in parallel.
func RunConsumerSuite(t *testing.T, newBroker func(t *testing.T) *ConsumerBroker) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, b *ConsumerBroker)
	}{
		{"MalformedIsSkippedAndAFailureRetried", malformedIsSkippedAndAFailureRetried},
		{"FailedBatchIsHandledOneAtATime", failedBatchIsHandledOneAtATime},
		{"MalformedInABatchIsSkippedAfterItsCommit", func(t *testing.T, b *ConsumerBroker) { malformedAreSkippedAfterTheCommit(t, b, 0) }},
		{"MalformedInAFailedBatchIsSkippedOnItsOwn", func(t *testing.T, b *ConsumerBroker) { malformedAreSkippedAfterTheCommit(t, b, 1<<30) }},
		{"NothingIsAcknowledgedBeforeTheCommit", nothingIsAcknowledgedBeforeTheCommit},
		{"RedeliveryIsAppliedOnce", redeliveryIsAppliedOnce},
		{"SecondConsumerTakesOver", secondConsumerTakesOver},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newBroker(t))
		})
	}
}

// outcomes counts what a consumer observes.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) observe(_, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[outcome]++
}

func (o *outcomes) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.n {
		out[k] = v
	}
	return out
}

// eventHandler hands a Recorder's Handle (and partitions) to a consumer, but
// not its HandleBatch: the consumer handles events one at a time.
type eventHandler struct{ r *Recorder }

func (h eventHandler) Handle(ctx context.Context, ev inbox.Event) error { return h.r.Handle(ctx, ev) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, suiteWait, 10*time.Millisecond, what)
}

func eventIDs(msgs []Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID()
	}
	return ids
}

// A malformed message (bad JSON; no headers) between two good ones of the
// same post is skipped and counted; both good ones are handled, in order,
// with their coordinates; a handler failure gets the same event again
// instead of skipping it.
func malformedIsSkippedAndAFailureRetried(t *testing.T, b *ConsumerBroker) {
	first, second := WellFormed(1, 7), WellFormed(2, 7)
	badJSON := Message{Key: "7", Value: []byte("{not json"), Headers: map[string]string{
		event.HeaderEventID: "bad", event.HeaderEventType: string(event.PostingEvent)}}
	noHeaders := Message{Key: "7", Value: first.Value}
	b.Publish(t, first, badJSON, noHeaders, second)

	h := &Recorder{FailFirst: map[string]int{second.EventID(): 2}}
	var o outcomes
	stop := b.Start(t, eventHandler{h}, o.observe)
	waitFor(t, "both good messages handled", func() bool { return len(h.EventIDs()) >= 2 })
	evs := h.Events()
	require.Equal(t, []string{first.EventID(), second.EventID()}, h.EventIDs())
	require.Equal(t, evs[0].Partition, evs[1].Partition, "one post, one partition")
	require.Less(t, evs[0].Offset, evs[1].Offset)
	if b.Offset != nil {
		require.Equal(t, b.Offset(0), evs[0].Offset)
		require.Equal(t, b.Offset(3), evs[1].Offset)
	}
	require.Equal(t, b.Topic, evs[1].Topic)
	require.EqualValues(t, 7, evs[1].PostID)
	require.Equal(t, 3, h.Calls(second.EventID()), "two failures, then handled")
	require.Equal(t, map[string]int{"malformed": 2, "error": 2}, o.counts())
	if b.Dead != nil {
		require.Equal(t, [][]byte{badJSON.Value, noHeaders.Value}, b.Dead(t, 2))
	}
	requireAcknowledged(t, b, stop, 100)
}

// Batches the handler fails are handled again one event at a time, in order,
// each retried until it is settled: no event is skipped or doubled.
func failedBatchIsHandledOneAtATime(t *testing.T, b *ConsumerBroker) {
	var msgs []Message
	for i := range 50 {
		msgs = append(msgs, WellFormed(i, int64(i%3+1)))
	}
	want := eventIDs(msgs)
	last := want[len(want)-1]
	h := &Recorder{FailBatches: 1 << 30, FailFirst: map[string]int{last: 1}} // the last one fails once more on its own
	b.Publish(t, msgs...)
	stop := b.Start(t, h, nil)
	waitFor(t, "every event handled", func() bool { return len(h.EventIDs()) >= len(want) })
	require.Equal(t, want, h.EventIDs())
	require.Equal(t, 2, h.Calls(last), "the last event was retried on its own")
	requireAcknowledged(t, b, stop, 100)
}

// Events the handler reports malformed, and messages that do not decode,
// are skipped and counted once the batch committed (or, when the handler
// fails failBatches batches, once each is handled on its own); the rest is
// handled once, in order, and everything is acknowledged.
func malformedAreSkippedAfterTheCommit(t *testing.T, b *ConsumerBroker, failBatches int) {
	var msgs []Message
	var want []string
	h := &Recorder{Malformed: map[string]bool{}, FailBatches: failBatches}
	for i := range 30 {
		m := WellFormed(i, int64(i%4+1))
		msgs = append(msgs, m)
		switch i {
		case 10, 29: // the handler's verdict, the last one too
			h.Malformed[m.EventID()] = true
		default:
			want = append(want, m.EventID())
		}
		if i == 20 {
			msgs = append(msgs, Message{Key: "1", Value: []byte("{not json"), Headers: m.Headers})
		}
	}
	b.Publish(t, msgs...)
	var o outcomes
	stop := b.Start(t, h, o.observe)
	waitFor(t, "the malformed messages counted", func() bool { return o.counts()["malformed"] >= 3 })
	require.Equal(t, want, h.EventIDs())
	require.Equal(t, map[string]int{"malformed": 3}, o.counts())
	if b.Dead != nil {
		require.ElementsMatch(t, [][]byte{msgs[10].Value, []byte("{not json"), msgs[30].Value}, b.Dead(t, 3))
	}
	requireAcknowledged(t, b, stop, 101)
}

// requireAcknowledged stops the consumer (stop) and checks that the next
// one starts after everything published: it gets a new message, n, alone.
// The messages are read in order, so anything not acknowledged would come
// before it.
func requireAcknowledged(t *testing.T, b *ConsumerBroker, stop func(), n int) {
	t.Helper()
	stop()
	sentinel := WellFormed(n, 3)
	b.Publish(t, sentinel)
	next := &Recorder{}
	b.Start(t, next, nil)
	waitFor(t, "the sentinel handled", func() bool { return len(next.EventIDs()) >= 1 })
	require.Equal(t, []string{sentinel.EventID()}, next.EventIDs(), "what came before was acknowledged")
}

// The messages waiting go to the handler as batches, in order; a consumer
// that dies while a batch is being handled (before its commit) has
// acknowledged nothing of it, so the next consumer gets the whole batch
// again; once a batch was handled it is acknowledged, and a later consumer
// starts after it. A malformed message inside a batch is skipped and
// counted once.
func nothingIsAcknowledgedBeforeTheCommit(t *testing.T, b *ConsumerBroker) {
	const n = 200
	var msgs []Message
	var want []string
	for i := range n {
		m := WellFormed(i, int64(i%7+1))
		msgs, want = append(msgs, m), append(want, m.EventID())
		if i == n/2 {
			msgs = append(msgs, Message{Key: "3", Value: []byte("{not json"), Headers: m.Headers})
		}
	}
	b.Publish(t, msgs...)

	dying := &Recorder{Block: true, Entered: make(chan struct{}, 1)}
	stop := b.Start(t, dying, nil)
	select {
	case <-dying.Entered:
	case <-time.After(suiteWait):
		t.Fatal("no batch reached the handler")
	}
	stop() // dies before the batch commits

	h := &Recorder{}
	var o outcomes
	stop = b.Start(t, h, o.observe)
	waitFor(t, "every event handled", func() bool { return len(h.EventIDs()) >= n })
	require.Equal(t, want, h.EventIDs(), "every event again, once, in order")
	sizes := h.Sizes()
	require.NotEmpty(t, sizes, "no batch")
	require.Less(t, len(sizes), n, "the waiting messages came in batches: %v", sizes)
	for _, s := range sizes {
		require.LessOrEqual(t, s, inbox.MaxBatch)
	}
	// Counted once the batch committed: maybe just after the recorder saw it.
	waitFor(t, "the malformed message counted", func() bool { return o.counts()["malformed"] >= 1 })
	require.Equal(t, map[string]int{"malformed": 1}, o.counts())
	if b.Dead != nil {
		require.Equal(t, [][]byte{[]byte("{not json")}, b.Dead(t, 1))
	}
	requireAcknowledged(t, b, stop, n+1)
}

// A consumer that dies after its commit and before its acknowledgement gets
// its messages delivered again, to the next consumer, which finds them in
// the inbox: every event is applied once, a message published twice too.
func redeliveryIsAppliedOnce(t *testing.T, b *ConsumerBroker) {
	db := databasetest.NewSQLite(t)
	var msgs []Message
	for i := range 20 {
		msgs = append(msgs, WellFormed(i, int64(i%4+1)))
	}
	msgs = append(msgs, msgs[5]) // a producer's retry
	want := eventIDs(msgs[:20])

	a := &Applier{DB: db.DB, Consumer: "suite", Crashed: make(chan struct{}, 1)}
	a.CrashAfterCommit(true)
	b.Publish(t, msgs...)
	stop := b.Start(t, a, nil)
	select {
	case <-a.Crashed:
	case <-time.After(suiteWait):
		t.Fatal("nothing was committed")
	}
	stop() // dies between its commit and its acknowledgement
	crashed := a.CrashedEvents()
	require.NotEmpty(t, crashed)

	a.CrashAfterCommit(false)
	b.Start(t, a, nil)
	waitFor(t, "every event applied, those committed before the crash delivered again", func() bool {
		for _, id := range want {
			if a.Applied(id) == 0 {
				return false
			}
		}
		for _, id := range crashed {
			if a.Delivered(id) < 2 {
				return false
			}
		}
		return a.Delivered(want[5]) >= 2
	})
	for _, id := range want {
		require.Equal(t, 1, a.Applied(id), "event %s applied", id)
		done, err := inbox.Processed(context.Background(), db.DB, "suite", id)
		require.NoError(t, err)
		require.True(t, done, "event %s in the inbox", id)
	}
}

// A second consumer waiting while the first runs takes over when the first
// stops: it gets what was published since, nothing the first handled, and
// each hears of the partitions it owns.
func secondConsumerTakesOver(t *testing.T, b *ConsumerBroker) {
	var msgs []Message
	for i := range 20 {
		msgs = append(msgs, WellFormed(i, int64(i%5+1)))
	}
	b.Publish(t, msgs[:10]...)
	h1 := &Recorder{}
	stop1 := b.Start(t, h1, nil)
	waitFor(t, "the first consumer handled the first half", func() bool { return len(h1.EventIDs()) >= 10 })
	h2 := &Recorder{}
	b.Start(t, h2, nil)
	stop1()
	require.Equal(t, eventIDs(msgs[:10]), h1.EventIDs())
	assigned, revoked := h1.Partitions()
	require.NotEmpty(t, assigned, "the first consumer heard of its partitions")
	require.Equal(t, assigned, revoked, "and let go of them when it stopped")
	for _, ev := range h1.Events() {
		require.Contains(t, assigned[len(assigned)-1], ev.Partition)
	}

	b.Publish(t, msgs[10:]...)
	waitFor(t, "the second consumer handled the second half", func() bool { return len(h2.EventIDs()) >= 10 })
	require.Equal(t, eventIDs(msgs[10:]), h2.EventIDs(), "nothing lost, nothing the first handled")
	assigned, _ = h2.Partitions()
	require.NotEmpty(t, assigned, "the second consumer heard of its partitions")
}
