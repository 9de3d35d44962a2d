package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/inbox/inboxtest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// recorder is a Publisher that counts the calls per post, notes their keys
// and any call before the post's time, and fails each post's first
// failures calls.
type recorder struct {
	failures int
	mu       sync.Mutex
	calls    map[int64]int
	keys     map[int64][]string
	early    []int64
}

func (r *recorder) Publish(_ context.Context, p worker.Publishing) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls, r.keys = map[int64]int{}, map[int64][]string{}
	}
	r.calls[p.Post.ID]++
	r.keys[p.Post.ID] = append(r.keys[p.Post.ID], p.Key)
	if time.Now().Before(p.Post.ScheduledAt) {
		r.early = append(r.early, p.Post.ID)
	}
	if r.calls[p.Post.ID] <= r.failures {
		return errors.New("webhook down")
	}
	return nil
}

func (r *recorder) keysOf(id int64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys[id]...)
}

func reservationMessage(t *testing.T, p *reservation.Post) outbox.Message {
	t.Helper()
	m, err := outbox.NewMessage(reservationtest.Outbox(t, event.ReservationEvent, p.ID, time.Now(), event.ReservationEventFields{ScheduledAt: p.ScheduledAt}))
	require.NoError(t, err)
	return *m
}

// workerNames returns fresh names for an exchange and a worker's queue,
// deleted after t with the queue's dead-letter queue.
func workerNames(t testing.TB, url string) (exchange, queue string) {
	t.Helper()
	exchange, queue = rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, url, exchange, queue, rabbitmq.DeadQueue(queue))
	return exchange, queue
}

// declaredWorkerQueue declares a worker's exchange and queue, as the worker
// does at start, and returns them with a channel in confirm mode to publish
// to the exchange.
func declaredWorkerQueue(t testing.TB, url string) (exchange, queue string, ch *amqp.Channel) {
	t.Helper()
	exchange, queue = workerNames(t, url)
	require.NoError(t, rabbitmq.DeclareQueue(context.Background(), url, exchange, queue, 3*time.Second))
	ch = rabbitmqtest.Channel(t, url)
	require.NoError(t, ch.Confirm(false))
	return exchange, queue, ch
}

// member is one worker process: its worker and its consumer, connected
// through a proxy that the test can cut.
type member struct {
	w     *worker.Worker
	c     *rabbitmq.Consumer
	proxy *rabbitmqtest.Proxy
}

func startMember(t *testing.T, db *gorm.DB, url, exchange, queue string, pub worker.Publisher) *member {
	t.Helper()
	return startMemberWith(t, db, url, exchange, queue, worker.Config{Publisher: pub})
}

// startMemberWith is startMember with cfg for the worker; its Consumer is
// queue, and an unset Logger, RetryBase or RetryMax is quiet, 50 ms, 200 ms.
func startMemberWith(t *testing.T, db *gorm.DB, url, exchange, queue string, cfg worker.Config) *member {
	t.Helper()
	cfg.Consumer = queue
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase, cfg.RetryMax = 50*time.Millisecond, 200*time.Millisecond
	}
	w, err := worker.New(db, cfg)
	require.NoError(t, err)
	proxy := rabbitmqtest.StartProxy(t, url)
	c, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: proxy.URL, Exchange: exchange, Queue: queue,
		ProbeInterval: 100 * time.Millisecond, ReconnectMax: time.Second}, w, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { c.Stop(); w.Stop() })
	require.Eventually(t, func() bool { return c.Ping(context.Background()) == nil }, 30*time.Second, 10*time.Millisecond)
	return &member{w: w, c: c, proxy: proxy}
}

// kill ends a member as a crash would: its connection drops and its
// timers are gone.
func (m *member) kill() {
	m.proxy.Cut()
	m.w.Stop()
	m.c.Stop()
}

// Two workers on one queue: one is active and holds the timers; when it is
// killed the other becomes active, arms every pending publication, takes
// the rest of the queue, and every post is published once, none early.
func TestSecondWorkerTakesOverWhenTheActiveOneDies(t *testing.T) {
	eachWorkerQueue(t, func(t *testing.T, db *database.DB, url, exchange, queue string) {
		pub := &recorder{}
		members := []*member{startMember(t, db.DB, url, exchange, queue, pub), startMember(t, db.DB, url, exchange, queue, pub)}
		sender := newSender(t, url, exchange)

		const before, after = 20, 10
		var posts []*reservation.Post
		send := func(n int) {
			var msgs []outbox.Message
			for range n {
				p := reservationtest.InsertWorking(t, db.DB, time.Now().Add(4*time.Second))
				posts = append(posts, p)
				msgs = append(msgs, reservationMessage(t, p))
			}
			for _, err := range sender.Send(context.Background(), relay.Envelopes(msgs)) {
				require.NoError(t, err)
			}
		}
		send(before)
		var active, standby *member
		require.Eventually(t, func() bool {
			for i, m := range members {
				if m.w.Pending() == before {
					active, standby = m, members[1-i]
					return true
				}
			}
			return false
		}, 30*time.Second, 10*time.Millisecond, "one worker holds every timer")
		require.Zero(t, standby.w.Pending(), "the waiting worker holds nothing")

		active.kill()
		send(after)
		require.Eventually(t, func() bool {
			return standby.w.Pending() > 0 || reservationtest.Count(t, db.DB, reservation.StatusPublished) > 0
		},
			30*time.Second, 10*time.Millisecond, "the other worker took over")
		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) == int64(len(posts)) },
			time.Minute, 20*time.Millisecond)

		var pubs []worker.Publication
		require.NoError(t, db.DB.Find(&pubs).Error)
		require.Len(t, pubs, len(posts))
		for _, p := range pubs {
			require.Equal(t, rabbitmq.Partition, p.PartitionID)
		}
		pub.mu.Lock()
		defer pub.mu.Unlock()
		require.Empty(t, pub.early, "published before their time")
		require.Len(t, pub.calls, len(posts))
		for id, n := range pub.calls {
			require.Equal(t, 1, n, "post %d published %d times", id, n)
		}
		for _, p := range posts {
			got, err := reservation.LoadPost(db.DB, p.ID)
			require.NoError(t, err)
			require.Equal(t, reservation.StatusPublished, got.Status)
			require.False(t, got.PublishedAt.Before(p.ScheduledAt), "post %d published early", p.ID)
		}
	})
}

// The consumer passes the suite every broker's consumer passes, on a queue
// of its own fed through one confirmed channel, so that it holds the
// messages in their order; malformed messages are dead-lettered to
// <queue>.dead, not requeued.
func TestConsumerPassesTheConsumerSuite(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	ctx := context.Background()
	inboxtest.RunConsumerSuite(t, func(t *testing.T) *inboxtest.ConsumerBroker {
		exchange, queue, ch := declaredWorkerQueue(t, url)
		return &inboxtest.ConsumerBroker{
			Topic:   queue,
			Publish: func(t *testing.T, msgs ...inboxtest.Message) { publishConfirmed(t, ch, exchange, msgs...) },
			Start: func(t *testing.T, h inbox.Handler, observe func(string, string)) func() {
				c, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: url, Exchange: exchange, Queue: queue,
					ProbeInterval: 100 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
					Observe: observe}, h, slog.New(slog.DiscardHandler))
				require.NoError(t, err)
				require.NoError(t, c.Start(ctx))
				t.Cleanup(c.Stop)
				return c.Stop
			},
			Dead: func(t *testing.T, n int) [][]byte {
				dead, ch := rabbitmq.DeadQueue(queue), rabbitmqtest.Channel(t, url)
				count := func() int {
					q, err := ch.QueueDeclarePassive(dead, true, false, false, false, nil)
					require.NoError(t, err)
					return q.Messages
				}
				require.Eventually(t, func() bool { return count() >= n }, 10*time.Second, 20*time.Millisecond)
				require.Equal(t, n, count(), "dead-lettered messages")
				var values [][]byte
				for _, d := range rabbitmqtest.ReadRaw(t, url, dead, n, 10*time.Second) {
					values = append(values, d.Body)
				}
				return values
			},
		}
	})
}

// publishConfirmed publishes msgs to exchange on ch, a channel in confirm
// mode, and waits until the broker took each.
func publishConfirmed(t *testing.T, ch *amqp.Channel, exchange string, msgs ...inboxtest.Message) {
	t.Helper()
	ctx := context.Background()
	var confirms []*amqp.DeferredConfirmation
	for _, m := range msgs {
		headers := amqp.Table{}
		for k, v := range m.Headers {
			headers[k] = v
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, m.Key, true, false,
			amqp.Publishing{Headers: headers, Body: m.Value, DeliveryMode: amqp.Persistent})
		require.NoError(t, err)
		confirms = append(confirms, c)
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the broker took the message")
	}
}

// An active consumer whose connection is lost while it retries an event
// (its database down) lets go at once: the broker has handed the event and
// the queue to the waiting consumer, so the first stops handling it and
// revokes its partition, instead of retrying, and holding the partition's
// work, beside the new active consumer until its database is back.
func TestLostConnectionEndsTheRetriesOfTheEventInHand(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	ctx := context.Background()
	exchange, queue, ch := declaredWorkerQueue(t, url)
	m := inboxtest.WellFormed(1, 7)
	publishConfirmed(t, ch, exchange, m)

	start := func(url string, h *inboxtest.Recorder) {
		c, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: url, Exchange: exchange, Queue: queue,
			ProbeInterval: 50 * time.Millisecond, ReconnectBase: time.Second, ReconnectMax: time.Second,
			RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}, h, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(c.Stop)
	}
	proxy := rabbitmqtest.StartProxy(t, url)
	down := &inboxtest.Recorder{FailFirst: map[string]int{m.EventID(): 1 << 30}}
	start(proxy.URL, down)
	require.Eventually(t, func() bool { return down.Calls(m.EventID()) >= 2 }, 30*time.Second, 10*time.Millisecond,
		"the first consumer is active and retrying the event")
	next := &inboxtest.Recorder{}
	start(url, next)

	proxy.Cut()
	require.Eventually(t, func() bool { return len(next.EventIDs()) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the waiting consumer took over the event")
	require.Eventually(t, func() bool { _, revoked := down.Partitions(); return len(revoked) == 1 }, 5*time.Second,
		10*time.Millisecond, "the first consumer let go of its partition")
	require.Empty(t, down.EventIDs(), "the first consumer never handled the event")
}

// A consumer stopped in the middle of a batch (a rolling restart under a
// backlog larger than its prefetch) hands the queue over in its order: the
// waiting consumer gets the abandoned batch first, then the messages the
// first never received. Cancelling the consumer before closing its
// connection made RabbitMQ activate the waiting one at the cancel, with the
// messages after the batch, and return the batch behind them.
func TestStoppedConsumerHandsItsBatchOverInQueueOrder(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	ctx := context.Background()
	exchange, queue, ch := declaredWorkerQueue(t, url)
	var msgs []inboxtest.Message
	for i := range 20 {
		msgs = append(msgs, inboxtest.WellFormed(i, int64(i%3+1)))
	}
	publishConfirmed(t, ch, exchange, msgs...)

	start := func(h *inboxtest.Recorder) *rabbitmq.Consumer {
		c, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: url, Exchange: exchange, Queue: queue, Prefetch: 5,
			ProbeInterval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond},
			h, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(c.Stop)
		return c
	}
	stopping := &inboxtest.Recorder{Block: true, Entered: make(chan struct{}, 1)}
	first := start(stopping)
	select {
	case <-stopping.Entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch reached the first consumer")
	}
	next := &inboxtest.Recorder{}
	second := start(next)
	// Connected once its consume is registered: it waits.
	require.Eventually(t, func() bool { return second.Ping(ctx) == nil }, 30*time.Second, 10*time.Millisecond,
		"the second consumer waits")
	first.Stop()

	require.Eventually(t, func() bool { return len(next.EventIDs()) >= len(msgs) }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, eventIDs(msgs), next.EventIDs(), "every message once, in queue order")
}

// A consumer stopped right after a run of single acknowledgements has had
// all of them applied: the next consumer gets only what came after. A
// quorum queue's channel holds back the acknowledgements past 32 in flight
// and drops them when the channel closes (RabbitMQ's rabbit_fifo_client
// stashes settles while the queue is slow to apply them). Another quorum
// queue written meanwhile keeps the node's log, and so the queue, slow:
// without the consumer's confirmed probe before its close, some round of
// this test got handled events again in 18 of 20 runs.
func TestStoppedConsumerHasItsAcknowledgementsApplied(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	ctx := context.Background()
	exchange, queue, ch := declaredWorkerQueue(t, url)
	_, busyQueue, busy := declaredWorkerQueue(t, url)
	start := func(h inbox.Handler) *rabbitmq.Consumer {
		c, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: url, Exchange: exchange, Queue: queue,
			ProbeInterval: 50 * time.Millisecond}, h, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(c.Stop)
		return c
	}
	for round := range 4 {
		var msgs []inboxtest.Message
		for i := range 500 {
			msgs = append(msgs, inboxtest.WellFormed(round*1000+i, int64(i%3+1)))
		}
		publishConfirmed(t, ch, exchange, msgs...)
		// One event at a time: one multiple ack per message, as fast as the
		// consumer reads them, while the other queue is written.
		h := &inboxtest.Recorder{}
		c := start(oneAtATime{h})
		done := make(chan struct{})
		flooded := make(chan struct{})
		go func() {
			defer close(flooded)
			for range 10000 { // bounded: at most 10 MB a round
				select {
				case <-done:
					return
				default:
				}
				if busy.PublishWithContext(ctx, "", busyQueue, false, false,
					amqp.Publishing{DeliveryMode: amqp.Persistent, Body: make([]byte, 1024)}) != nil {
					return
				}
			}
		}()
		require.Eventually(t, func() bool { return len(h.EventIDs()) >= len(msgs) }, 30*time.Second, time.Millisecond)
		c.Stop()
		close(done)
		<-flooded
		require.Equal(t, eventIDs(msgs), h.EventIDs())

		sentinel := inboxtest.WellFormed(round*1000+999, 3)
		publishConfirmed(t, ch, exchange, sentinel)
		next := &inboxtest.Recorder{}
		c = start(next)
		require.Eventually(t, func() bool { return len(next.EventIDs()) >= 1 }, 30*time.Second, 10*time.Millisecond)
		c.Stop()
		require.Equal(t, []string{sentinel.EventID()}, next.EventIDs(), "round %d: what the first consumer handled was acknowledged", round)
	}
}

// oneAtATime hands a Recorder's Handle to a consumer, not its HandleBatch.
type oneAtATime struct{ r *inboxtest.Recorder }

func (h oneAtATime) Handle(ctx context.Context, ev inbox.Event) error { return h.r.Handle(ctx, ev) }

// eventIDs returns the event ids of msgs, in order.
func eventIDs(msgs []inboxtest.Message) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID()
	}
	return ids
}

// A deployment moved from Kafka to RabbitMQ: a publication the Kafka worker
// recorded under partition 3 is still PENDING. The RabbitMQ worker adopts it
// when it becomes the active consumer (partition 0 is the only one now) and
// publishes its post at its time, once.
func TestWorkerAdoptsPublicationsOfKafkaPartitions(t *testing.T) {
	eachWorkerQueue(t, func(t *testing.T, db *database.DB, url, exchange, queue string) {
		p := reservationtest.InsertWorking(t, db.DB, time.Now().Add(2*time.Second))
		kafkaEra(t, db.DB, p, 3, worker.PublicationPending)

		pub := &recorder{}
		startMember(t, db.DB, url, exchange, queue, pub)
		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) == 1 }, 30*time.Second, 20*time.Millisecond,
			"the post of the Kafka-era publication is published")
		var got worker.Publication
		require.NoError(t, db.DB.First(&got, "post_id = ?", p.ID).Error)
		require.Equal(t, worker.PublicationPublished, got.Status)
		require.Equal(t, rabbitmq.Partition, got.PartitionID)
		pub.mu.Lock()
		defer pub.mu.Unlock()
		require.Equal(t, map[int64]int{p.ID: 1}, pub.calls)
		require.Empty(t, pub.early)
	})
}

// eachWorkerQueue runs fn in parallel on each database, with the RabbitMQ
// URL and a fresh exchange and worker queue (workerNames).
func eachWorkerQueue(t *testing.T, fn func(t *testing.T, db *database.DB, url, exchange, queue string)) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		fn(t, db, url, exchange, queue)
	})
}

// kafkaEra writes the publication a Kafka worker would have recorded for p
// under partition, with status.
func kafkaEra(t *testing.T, db *gorm.DB, p *reservation.Post, partition int32, status worker.PublicationStatus) {
	t.Helper()
	now := database.Normalize(time.Now())
	pub := worker.Publication{PostID: p.ID, EventID: reservationMessage(t, p).EventID, PartitionID: partition,
		ScheduledAt: p.ScheduledAt, Status: status, CreatedAt: now, UpdatedAt: now}
	require.NoError(t, db.Create(&pub).Error)
}

// settledCounter counts the publications workers settled as PUBLISHED.
type settledCounter struct{ published atomic.Int64 }

func (s *settledCounter) observe(outcome string) {
	if outcome == worker.OutcomePublished {
		s.published.Add(1)
	}
}

// kafkaWorker is a worker as `posting worker` runs it on Kafka: a
// kafka.Consumer assigns it partitions and hands it events; here the test
// plays the consumer.
func kafkaWorker(t *testing.T, db *gorm.DB, pub worker.Publisher, settled *settledCounter, partitions ...int32) *worker.Worker {
	t.Helper()
	w, err := worker.New(db, worker.Config{Consumer: "posting-worker", Publisher: pub, Logger: slog.New(slog.DiscardHandler),
		RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, SweepInterval: 200 * time.Millisecond,
		ObserveSettled: settled.observe})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	require.NoError(t, w.Assigned(context.Background(), "posting-events", partitions))
	return w
}

// startAdopter is startMember with a short sweep and a settled counter.
func startAdopter(t *testing.T, db *gorm.DB, url, exchange, queue string, pub worker.Publisher, settled *settledCounter) *member {
	t.Helper()
	return startMemberWith(t, db, url, exchange, queue, worker.Config{Publisher: pub,
		SweepInterval: 200 * time.Millisecond, ObserveSettled: settled.observe})
}

// requirePublishedOnce checks that every post of posts is PUBLISHED, not
// before its time, with its publication PUBLISHED under partition 0 at the
// same instant.
func requirePublishedOnce(t *testing.T, db *gorm.DB, posts []*reservation.Post) {
	t.Helper()
	requirePublishedOnceUnder(t, db, posts, nil)
}

// requirePublishedOnceUnder is requirePublishedOnce where a publication may
// also have stayed under kafkaPartition[post]: a Kafka worker still running
// may publish it before the RabbitMQ worker adopts it.
func requirePublishedOnceUnder(t *testing.T, db *gorm.DB, posts []*reservation.Post, kafkaPartition map[int64]int32) {
	t.Helper()
	for _, p := range posts {
		got, err := reservation.LoadPost(db, p.ID)
		require.NoError(t, err)
		require.Equal(t, reservation.StatusPublished, got.Status, "post %d", p.ID)
		require.False(t, got.PublishedAt.Before(p.ScheduledAt), "post %d published early", p.ID)
		var pub worker.Publication
		require.NoError(t, db.First(&pub, "post_id = ?", p.ID).Error)
		require.Equal(t, worker.PublicationPublished, pub.Status, "post %d", p.ID)
		if k, ok := kafkaPartition[p.ID]; !ok || pub.PartitionID != k {
			require.Equal(t, rabbitmq.Partition, pub.PartitionID, "post %d", p.ID)
		}
		require.True(t, pub.PublishedAt.Equal(*got.PublishedAt), "post %d: publication and post disagree", p.ID)
		require.Equal(t, 1, pub.Attempts, "post %d: attempts", p.ID)
	}
}

// Two RabbitMQ workers start at once on a database the Kafka worker left
// with 200 PENDING publications over partitions 0..5, a quarter overdue,
// the rest due within 2 to 4 s, plus a FAILED and a CANCELLED one under
// partition 3. The active one is killed mid-way; the standby adopts what is
// left. Every post is published once, none early; the FAILED and CANCELLED
// rows keep their partition and status. The database records each
// publication once; only calls in flight at the kill may be made again.
func TestTwoWorkersAdoptManyKafkaPublications(t *testing.T) {
	eachWorkerQueue(t, func(t *testing.T, db *database.DB, url, exchange, queue string) {
		const n = 200
		var posts []*reservation.Post
		for i := range n {
			at := time.Now().Add(2*time.Second + time.Duration(i%20)*100*time.Millisecond)
			if i%4 == 0 {
				at = time.Now().Add(-10 * time.Second)
			}
			p := reservationtest.InsertWorking(t, db.DB, at)
			posts = append(posts, p)
			kafkaEra(t, db.DB, p, int32(i%6), worker.PublicationPending)
		}
		failed := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Minute))
		kafkaEra(t, db.DB, failed, 3, worker.PublicationFailed)
		cancelled := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Second))
		require.NoError(t, db.DB.Model(cancelled).Update("status", reservation.StatusCancelled).Error)
		kafkaEra(t, db.DB, cancelled, 3, worker.PublicationCancelled)

		var pubs [2]recorder // each member's publisher calls
		settled := &settledCounter{}
		var members [2]*member
		var wg sync.WaitGroup
		for i := range members {
			wg.Go(func() { members[i] = startAdopter(t, db.DB, url, exchange, queue, &pubs[i], settled) })
		}
		wg.Wait()

		var active, standby *member
		require.Eventually(t, func() bool {
			for i, m := range members {
				if m.w.Pending() > 0 {
					active, standby = m, members[1-i]
					return true
				}
			}
			return false
		}, 30*time.Second, 5*time.Millisecond, "one worker adopted and armed")
		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) > 0 }, 30*time.Second, 5*time.Millisecond)
		require.Less(t, reservationtest.Count(t, db.DB, reservation.StatusPublished), int64(n), "killed mid-way")
		active.kill()
		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) == n }, time.Minute, 20*time.Millisecond,
			"the standby took over")
		_ = standby

		requirePublishedOnce(t, db.DB, posts)
		// Each worker calls the publisher once per post. A post both called
		// is one whose call was in flight when the active one died (called,
		// PUBLISHED not yet committed): the publisher is at least once, and
		// at most one slot's worth of calls can be in flight.
		calls := map[int64]int{}
		for i := range pubs {
			pubs[i].mu.Lock()
			require.Empty(t, pubs[i].early, "published before their time")
			for id, c := range pubs[i].calls {
				require.Equal(t, 1, c, "post %d published %d times by one worker", id, c)
				calls[id]++
			}
			pubs[i].mu.Unlock()
		}
		require.Len(t, calls, n)
		again := 0
		for _, c := range calls {
			if c > 1 {
				again++
			}
		}
		require.LessOrEqual(t, again, worker.DefaultConcurrency, "published again by the standby")
		require.EqualValues(t, n, settled.published.Load(), "publications settled PUBLISHED once each")

		for _, p := range []struct {
			post   *reservation.Post
			status worker.PublicationStatus
		}{{failed, worker.PublicationFailed}, {cancelled, worker.PublicationCancelled}} {
			var got worker.Publication
			require.NoError(t, db.DB.First(&got, "post_id = ?", p.post.ID).Error)
			require.Equal(t, p.status, got.Status)
			require.EqualValues(t, 3, got.PartitionID, "a settled publication is not adopted")
		}
		var post reservation.Post
		require.NoError(t, db.DB.First(&post, failed.ID).Error)
		require.Equal(t, reservation.StatusWorking, post.Status, "the FAILED post waits for an operator")
	})
}

// An operator starts the RabbitMQ worker without stopping the Kafka worker,
// which owns partitions 0..5 and has armed their publications. Both arm
// every adopted publication (the Kafka worker owns partition 0 too), and
// the database records each post once, none early; the publisher may be
// called twice for a post, with the same key.
func TestKafkaWorkerStillRunningWhileRabbitMQAdopts(t *testing.T) {
	eachWorkerQueue(t, func(t *testing.T, db *database.DB, url, exchange, queue string) {
		const n = 60
		var posts []*reservation.Post
		partition := map[int64]int32{}
		for i := range n {
			p := reservationtest.InsertWorking(t, db.DB, time.Now().Add(2*time.Second+time.Duration(i%10)*50*time.Millisecond))
			posts = append(posts, p)
			partition[p.ID] = int32(i % 6)
			kafkaEra(t, db.DB, p, partition[p.ID], worker.PublicationPending)
		}
		kafkaPub, rabbitPub := &recorder{}, &recorder{}
		settled := &settledCounter{}
		kw := kafkaWorker(t, db.DB, kafkaPub, settled, 0, 1, 2, 3, 4, 5)
		require.Equal(t, n, kw.Pending())
		startAdopter(t, db.DB, url, exchange, queue, rabbitPub, settled)

		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) == n }, time.Minute, 20*time.Millisecond)
		// Both workers let go of every timer: no later attempt.
		require.Eventually(t, func() bool { return kw.Pending() == 0 }, 30*time.Second, 20*time.Millisecond)
		requirePublishedOnceUnder(t, db.DB, posts, partition)
		require.EqualValues(t, n, settled.published.Load(), "publications settled PUBLISHED, over both workers")

		twice := 0
		for _, p := range posts {
			keys := append(kafkaPub.keysOf(p.ID), rabbitPub.keysOf(p.ID)...)
			require.NotEmpty(t, keys, "post %d", p.ID)
			var pub worker.Publication
			require.NoError(t, db.DB.First(&pub, "post_id = ?", p.ID).Error)
			for _, k := range keys {
				require.Equal(t, pub.EventID, k, "post %d: one key for every call", p.ID)
			}
			if len(keys) > 1 {
				twice++
			}
		}
		require.Empty(t, kafkaPub.early)
		require.Empty(t, rabbitPub.early)
		t.Logf("posts whose publisher was called by both workers: %d of %d", twice, n)
	})
}

// A Kafka worker still retrying an overdue publication of partition 3 (its
// publisher fails three times) when the RabbitMQ worker adopts it: the
// post is recorded once and the publication is settled PUBLISHED.
func TestAdoptionRacesARetriedPublication(t *testing.T) {
	eachWorkerQueue(t, func(t *testing.T, db *database.DB, url, exchange, queue string) {
		p := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
		kafkaEra(t, db.DB, p, 3, worker.PublicationPending)
		kafkaPub := &recorder{failures: 3}
		settled := &settledCounter{}
		kafkaWorker(t, db.DB, kafkaPub, settled, 3)
		require.Eventually(t, func() bool {
			kafkaPub.mu.Lock()
			defer kafkaPub.mu.Unlock()
			return kafkaPub.calls[p.ID] >= 1
		}, 30*time.Second, 5*time.Millisecond, "the Kafka worker is retrying")
		rabbitPub := &recorder{failures: 2}
		startAdopter(t, db.DB, url, exchange, queue, rabbitPub, settled)
		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) == 1 }, time.Minute, 20*time.Millisecond)
		got, err := reservation.LoadPost(db.DB, p.ID)
		require.NoError(t, err)
		var pub worker.Publication
		require.NoError(t, db.DB.First(&pub, "post_id = ?", p.ID).Error)
		require.Equal(t, worker.PublicationPublished, pub.Status)
		require.True(t, pub.PublishedAt.Equal(*got.PublishedAt))
		// A worker tells of the settling after its commit: wait for it.
		require.Eventually(t, func() bool { return settled.published.Load() >= 1 }, 10*time.Second, 5*time.Millisecond)
		require.EqualValues(t, 1, settled.published.Load())
	})
}

// The operator starts the RabbitMQ worker first and lets the Kafka worker
// drain its topic before stopping it (no downtime). The Kafka worker
// handles one more reservation after the adoption: its publication is
// recorded under partition 3, and the Kafka worker is then stopped. The
// RabbitMQ worker must still publish that post.
func TestPublicationRecordedUnderKafkaAfterAdoptionIsPublished(t *testing.T) {
	eachWorkerQueue(t, func(t *testing.T, db *database.DB, url, exchange, queue string) {
		rabbitPub, kafkaPub := &recorder{}, &recorder{}
		settled := &settledCounter{}
		m := startAdopter(t, db.DB, url, exchange, queue, rabbitPub, settled)
		// The RabbitMQ worker is the active consumer (it adopted nothing).
		probe := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		for _, err := range newSender(t, url, exchange).Send(context.Background(), relay.Envelopes([]outbox.Message{reservationMessage(t, probe)})) {
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return m.w.Pending() == 1 }, 30*time.Second, 10*time.Millisecond)

		kw := kafkaWorker(t, db.DB, kafkaPub, settled, 3)
		p := reservationtest.InsertWorking(t, db.DB, time.Now().Add(3*time.Second))
		msg := reservationMessage(t, p)
		ev, err := inbox.Decode([]byte(event.Key(p.ID)),
			map[string]string{event.HeaderEventID: msg.EventID, event.HeaderEventType: msg.EventType}, []byte(msg.Payload))
		require.NoError(t, err)
		ev.Topic, ev.Partition, ev.Offset = "posting-events", 3, 41
		require.NoError(t, kw.Handle(context.Background(), ev))
		require.Equal(t, 1, kw.Pending())
		kw.Revoked("posting-events", []int32{3})
		kw.Stop()

		require.Eventually(t, func() bool { return reservationtest.Count(t, db.DB, reservation.StatusPublished) == 1 }, 30*time.Second, 20*time.Millisecond,
			"the post the Kafka worker scheduled last is published")
		requirePublishedOnce(t, db.DB, []*reservation.Post{p})
		rabbitPub.mu.Lock()
		defer rabbitPub.mu.Unlock()
		require.Equal(t, map[int64]int{p.ID: 1}, rabbitPub.calls)
		require.Empty(t, rabbitPub.early)
	})
}

// Only a worker that adopted adopts in its sweep: a Kafka worker's sweep
// leaves the publications of partitions it does not own where they are.
func TestKafkaWorkerSweepDoesNotAdopt(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	p := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
	kafkaEra(t, db.DB, p, 2, worker.PublicationPending)
	kw := kafkaWorker(t, db.DB, &recorder{}, &settledCounter{}, 1)
	_, err := kw.Sweep(context.Background())
	require.NoError(t, err)
	var got worker.Publication
	require.NoError(t, db.DB.First(&got, "post_id = ?", p.ID).Error)
	require.EqualValues(t, 2, got.PartitionID)
	require.Zero(t, kw.Pending())
}
