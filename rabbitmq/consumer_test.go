package rabbitmq_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/inbox/inboxtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// recorder is a Publisher that counts calls per post and notes any call
// before the post's time.
type recorder struct {
	mu    sync.Mutex
	calls map[int64]int
	early []int64
}

func (r *recorder) Publish(_ context.Context, p worker.Publishing) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[int64]int{}
	}
	r.calls[p.Post.ID]++
	if time.Now().Before(p.Post.ScheduledAt) {
		r.early = append(r.early, p.Post.ID)
	}
	return nil
}

func insertWorking(t *testing.T, db *gorm.DB, at time.Time) *reservation.Post {
	t.Helper()
	now := database.Normalize(time.Now())
	p := &reservation.Post{Title: "t", Content: "c", Status: reservation.StatusWorking,
		ScheduledAt: database.Normalize(at), CreatedAt: now, UpdatedAt: now}
	require.NoError(t, db.Create(p).Error)
	return p
}

func reservationMessage(t *testing.T, p *reservation.Post) outbox.Message {
	t.Helper()
	m, err := outbox.NewMessage(eventtest.Outbox(t, event.ReservationEvent, p.ID, time.Now(), event.ReservationEventFields{ScheduledAt: p.ScheduledAt}))
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
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		pub := &recorder{}
		members := []*member{startMember(t, db.DB, url, exchange, queue, pub), startMember(t, db.DB, url, exchange, queue, pub)}
		sender := newSender(t, url, exchange)

		const before, after = 20, 10
		var posts []*reservation.Post
		send := func(n int) {
			var msgs []outbox.Message
			for range n {
				p := insertWorking(t, db.DB, time.Now().Add(4*time.Second))
				posts = append(posts, p)
				msgs = append(msgs, reservationMessage(t, p))
			}
			for _, err := range sender.Send(context.Background(), msgs) {
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
		require.Eventually(t, func() bool { return standby.w.Pending() > 0 || publishedCount(t, db.DB) > 0 },
			30*time.Second, 10*time.Millisecond, "the other worker took over")
		require.Eventually(t, func() bool { return publishedCount(t, db.DB) == int64(len(posts)) },
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

func publishedCount(t *testing.T, db *gorm.DB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Model(&reservation.Post{}).Where("status = ?", reservation.StatusPublished).Count(&n).Error)
	return n
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
		exchange, queue := workerNames(t, url)
		require.NoError(t, rabbitmq.DeclareQueue(ctx, url, exchange, queue, 3*time.Second))
		ch := rabbitmqtest.Channel(t, url)
		require.NoError(t, ch.Confirm(false))
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
	exchange, queue := workerNames(t, url)
	require.NoError(t, rabbitmq.DeclareQueue(ctx, url, exchange, queue, 3*time.Second))
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, ch.Confirm(false))
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
	exchange, queue := workerNames(t, url)
	require.NoError(t, rabbitmq.DeclareQueue(ctx, url, exchange, queue, 3*time.Second))
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, ch.Confirm(false))
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
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		p := insertWorking(t, db.DB, time.Now().Add(2*time.Second))
		now := database.Normalize(time.Now())
		kafkaEra := worker.Publication{PostID: p.ID, EventID: reservationMessage(t, p).EventID, PartitionID: 3,
			ScheduledAt: p.ScheduledAt, Status: worker.PublicationPending, CreatedAt: now, UpdatedAt: now}
		require.NoError(t, db.DB.Create(&kafkaEra).Error)

		pub := &recorder{}
		startMember(t, db.DB, url, exchange, queue, pub)
		require.Eventually(t, func() bool { return publishedCount(t, db.DB) == 1 }, 30*time.Second, 20*time.Millisecond,
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
