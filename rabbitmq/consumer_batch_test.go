package rabbitmq_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/inbox/inboxtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
)

// The deliveries waiting on the queue go to the handler as batches, in
// queue order, and are acknowledged only after the handler committed: a
// consumer that dies during a batch leaves every message of it to the next
// one, which gets them all, once, each post's in order; a malformed message among them
// is dead-lettered, and after the acks nothing is left on the queue.
func TestConsumerAcknowledgesABatchOnlyAfterTheHandlerCommitted(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	exchange, queue := workerNames(t, url)
	require.NoError(t, rabbitmq.DeclareQueue(context.Background(), url, exchange, queue, 3*time.Second))
	const n = 200
	msgs := make([]outbox.Message, n)
	want := make([]string, n)
	postOf := map[string]int64{}
	for i := range msgs {
		msgs[i] = reservationLike(t, int64(i%7+1))
		want[i], postOf[msgs[i].EventID] = msgs[i].EventID, int64(i%7+1)
	}
	// The sender spreads messages over channels: the queue keeps each
	// post's order, not the slice's.
	byPost := func(ids []string) map[int64][]string {
		m := map[int64][]string{}
		for _, id := range ids {
			m[postOf[id]] = append(m[postOf[id]], id)
		}
		return m
	}
	s := newSender(t, url, exchange)
	for _, err := range s.Send(context.Background(), msgs[:n/2]) {
		require.NoError(t, err)
	}
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, ch.PublishWithContext(context.Background(), exchange, "3", false, false, amqp.Publishing{
		Body: []byte("{not json"), Headers: amqp.Table{event.HeaderEventID: want[0], event.HeaderEventType: string(event.PostingEvent)}}))
	for _, err := range s.Send(context.Background(), msgs[n/2:]) {
		require.NoError(t, err)
	}
	start := func(h inbox.Handler, observe func(string, string)) *rabbitmq.Consumer {
		c, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: url, Exchange: exchange, Queue: queue,
			ProbeInterval: 100 * time.Millisecond, Observe: observe}, h, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(c.Stop)
		return c
	}

	dying := &inboxtest.Recorder{Block: true, Entered: make(chan struct{}, 1)}
	c1 := start(dying, nil)
	select {
	case <-dying.Entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no batch reached the handler")
	}
	c1.Stop() // dies before the batch commits

	var mu sync.Mutex
	malformed := 0
	h := &inboxtest.Recorder{}
	c2 := start(h, func(_, outcome string) {
		if outcome == "malformed" {
			mu.Lock()
			malformed++
			mu.Unlock()
		}
	})
	require.Eventually(t, func() bool { return len(h.EventIDs()) >= n }, 20*time.Second, 20*time.Millisecond)
	evs, sizes := h.EventIDs(), h.Sizes()
	require.Len(t, evs, n, "every message again, once")
	require.Equal(t, byPost(want), byPost(evs), "each post's messages in order")
	require.NotEmpty(t, sizes, "no batch")
	require.Less(t, len(sizes), n, "the waiting messages came in batches: %v", sizes)
	for _, size := range sizes {
		require.LessOrEqual(t, size, inbox.MaxBatch)
	}
	mu.Lock()
	require.Equal(t, 1, malformed)
	mu.Unlock()
	// A sentinel handled means the batches before it were acknowledged
	// (the next batch is read only after the last one's ack).
	sentinel := reservationLike(t, 3)
	for _, err := range s.Send(context.Background(), []outbox.Message{sentinel}) {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(h.EventIDs()) > n }, 20*time.Second, 20*time.Millisecond)
	c2.Stop()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true})
	require.NoError(t, err)
	require.LessOrEqual(t, q.Messages, 1, "every message before the sentinel was acknowledged or dead-lettered")
	dead, err := rabbitmqtest.Channel(t, url).QueueDeclarePassive(rabbitmq.DeadQueue(queue), true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 1, dead.Messages)
}
