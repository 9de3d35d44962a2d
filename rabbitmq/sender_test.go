package rabbitmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/relay/relaytest"
	"github.com/postingsvc/posting/relay/relaytest/sendertest"
)

func newSender(t testing.TB, url, exchange string) *rabbitmq.Sender {
	t.Helper()
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: url, Exchange: exchange}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSendPublishesTheContractMessage(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.BoundQueue(t, url, exchange)
	s := newSender(t, url, exchange)

	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var msgs []outbox.Message
	for i, typ := range []event.Type{event.PostingEvent, event.ReservationEvent} {
		fields := map[string]any{"action": "CREATED", "status": "RESERVED", "scheduledAt": at}
		if typ == event.ReservationEvent {
			fields = map[string]any{"scheduledAt": at}
		}
		m, err := outbox.NewMessage(eventtest.Outbox(t, typ, 42, at, fields))
		require.NoError(t, err)
		m.ID = int64(i + 1)
		msgs = append(msgs, *m)
	}
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msgs[0].Traceparent = &tp // the second has none: no header
	before := time.Now().Add(-time.Second).Truncate(time.Second)
	errs := s.Send(context.Background(), msgs)
	require.Equal(t, []error{nil, nil}, errs)

	ds := rabbitmqtest.Read(t, url, queue, 2, 10*time.Second)
	require.Len(t, ds, 2)
	for i, d := range ds {
		m := msgs[i]
		require.Equal(t, exchange, d.Exchange)
		require.Equal(t, "42", d.RoutingKey)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		require.Equal(t, m.EventID, d.MessageId)
		require.Equal(t, m.EventType, d.Type)
		require.False(t, d.Timestamp.Before(before), "timestamp %s", d.Timestamp)
		// The contract's headers, the traceparent, and the CloudEvents AMQP
		// binding's attributes (binary mode: datacontenttype is the
		// content_type property above).
		want := amqp.Table{event.HeaderEventID: m.EventID, event.HeaderEventType: m.EventType,
			"cloudEvents_specversion": "1.0", "cloudEvents_id": m.EventID, "cloudEvents_source": "/posting",
			"cloudEvents_type": m.EventType, "cloudEvents_time": "2026-12-03T10:00:00Z",
			"cloudEvents_sequence": event.FormatSequence(m.ID)}
		if i == 0 {
			want[event.HeaderTraceparent] = tp
		}
		require.Equal(t, want, d.Headers)
		require.JSONEq(t, string(event.WithSequence([]byte(m.Payload), m.ID)), string(d.Body))
		var v map[string]any
		require.NoError(t, json.Unmarshal(d.Body, &v))
		require.Equal(t, m.EventID, v["eventId"])
	}
}

// TestNackedMessageFailsAfterItsRetries sends an event the broker nacks
// (the only bound queue is full, x-max-length 0 with x-overflow
// reject-publish): the row ends FAIL after 1 + retries attempts, with the
// broker's reason. The other way it refuses a message (returned: no queue
// bound for its key) is the sender suite's rejection (NO_ROUTE).
func TestNackedMessageFailsAfterItsRetries(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		exchange := rabbitmqtest.Name("posting-events")
		queue := rabbitmqtest.Name("full")
		rabbitmqtest.DeleteAfter(t, url, exchange, queue)
		ch := rabbitmqtest.Channel(t, url)
		require.NoError(t, rabbitmq.DeclareExchange(ch, exchange))
		_, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-max-length": 0, "x-overflow": "reject-publish"})
		require.NoError(t, err)
		require.NoError(t, ch.QueueBind(queue, "#", exchange, false, nil))
		s := newSender(t, url, exchange)
		const retries = 2
		r, err := relay.New(outbox.NewStore(db), s, relay.Config{
			InstanceID: "relay-rejected", Interval: 20 * time.Millisecond, BatchSize: 10,
			MaxRetries: relay.Retries(retries), RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		rows := relaytest.Seed(t, db.DB, 1, 1, time.Now().Add(-time.Second))

		ctx := context.Background()
		var total relay.Result
		require.Eventually(t, func() bool {
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			require.False(t, res.Unavailable, "a rejection is not an outage")
			total.Claimed += res.Claimed
			total.Retried += res.Retried
			total.Failed += res.Failed
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusFail] == 1
		}, time.Minute, 20*time.Millisecond)
		require.Equal(t, 1+retries, total.Claimed, "1 + retries attempts")
		require.Equal(t, retries, total.Retried)
		require.Equal(t, 1, total.Failed)
		var got outbox.Message
		require.NoError(t, db.DB.First(&got, rows[0].ID).Error)
		require.Equal(t, outbox.StatusFail, got.Status)
		require.NotNil(t, got.LastError)
		require.Contains(t, *got.LastError, "nack for event")
	})
}

// TestSenderConformsToTheSenderSuite runs the relay's sender suite
// (relay/relaytest/sendertest) on the RabbitMQ server, each case on its
// own exchange and queue, the sender reaching the server through a proxy
// the suite cuts and stalls.
func TestSenderConformsToTheSenderSuite(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	sendertest.Run(t, func(t *testing.T) sendertest.Broker {
		exchange := rabbitmqtest.Name("posting-events")
		return &suiteBroker{url: url, exchange: exchange, queue: rabbitmqtest.BoundQueue(t, url, exchange),
			proxy: startStallProxy(t, url)}
	})
}

// suiteBroker is the sender suite's view of an exchange with one queue
// bound to every key.
type suiteBroker struct {
	url, exchange, queue string
	proxy                *stallProxy

	mu   sync.Mutex
	read []amqp.Delivery // consumed from the queue so far
}

// NewSender gives a short SendTimeout (the stall case) a long heartbeat,
// so that neither side gives up on the silent connection before the send's
// own bound does.
func (b *suiteBroker) NewSender(t testing.TB, o sendertest.Options) sendertest.Sender {
	t.Helper()
	cfg := rabbitmq.Config{URL: b.proxy.URL, Exchange: b.exchange}
	if o.SendTimeout > 0 {
		cfg.SendTimeout, cfg.DialTimeout, cfg.Heartbeat = o.SendTimeout, time.Second, time.Minute
	}
	s, err := rabbitmq.NewSender(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { b.proxy.resume(); _ = s.Close() })
	return s
}

// Read returns every message the queue received so far (reading consumes
// them, so it keeps what it read), waiting until atLeast came.
func (b *suiteBroker) Read(t testing.TB, atLeast int, timeout time.Duration) []sendertest.Arrived {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.read = append(b.read, rabbitmqtest.Read(t, b.url, b.queue, max(atLeast-len(b.read), 0), timeout)...)
	for _, d := range b.read {
		require.Equal(t, b.exchange, d.Exchange)
	}
	return arrivedAll(b.read)
}

// arrivedAll is what the sender suite reads of deliveries: one queue, one
// stream.
func arrivedAll(ds []amqp.Delivery) []sendertest.Arrived {
	out := make([]sendertest.Arrived, len(ds))
	for i, d := range ds {
		out[i] = sendertest.Arrived{Key: d.RoutingKey, EventID: d.MessageId, EventType: d.Type, Value: d.Body}
	}
	return out
}

// Reject leaves key unroutable, so the broker returns its messages
// (NO_ROUTE). A topic exchange cannot route "every key but one": the queue
// is bound to the suite's keys, 1 to 255, but key, instead of "#" (the new
// bindings first, so that no other key goes unroutable meanwhile); stop
// binds "#" again.
func (b *suiteBroker) Reject(t testing.TB, key string) func() {
	t.Helper()
	ch := rabbitmqtest.Channel(t, b.url)
	for k := 1; k < 256; k++ {
		if strconv.Itoa(k) != key {
			require.NoError(t, ch.QueueBind(b.queue, strconv.Itoa(k), b.exchange, false, nil))
		}
	}
	require.NoError(t, ch.QueueUnbind(b.queue, "#", b.exchange, nil))
	return func() { require.NoError(t, ch.QueueBind(b.queue, "#", b.exchange, false, nil)) }
}

func (b *suiteBroker) OtherKeys(key int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = key + 1 + int64(i)
	}
	return out
}

func (b *suiteBroker) IsRejection(err error) bool { return errors.Is(err, rabbitmq.ErrRejected) }

func (b *suiteBroker) RejectReason() string { return "NO_ROUTE" }

// Rejections cannot be told: a returned message reaches only its publisher.
func (b *suiteBroker) Rejections(string) int { return -1 }

func (b *suiteBroker) Down(testing.TB) { b.proxy.Cut() }

func (b *suiteBroker) Up(t testing.TB) { b.proxy.Restore(t) }

// Stall stops passing what senders send (a resource alarm blocks
// publishers) while the broker's frames still flow back.
func (b *suiteBroker) Stall(testing.TB) func() {
	b.proxy.stall()
	return b.proxy.resume
}

// reservationLike is an outbox row of a posting event about post, not stored.
func reservationLike(t testing.TB, post int64) outbox.Message {
	t.Helper()
	m, err := outbox.NewMessage(eventtest.Outbox(t, event.PostingEvent, post, time.Now(), map[string]any{"action": "UPDATED"}))
	require.NoError(t, err)
	return *m
}

// stallProxy forwards TCP to the broker and can stop reading what the
// client sends while still passing the broker's frames back: what a broker
// under a memory or disk alarm does to a publishing connection
// (connection.blocked), without touching the shared broker's alarms.
type stallProxy struct {
	*rabbitmqtest.Proxy

	mu   sync.Mutex
	flow chan struct{} // closed while the client's bytes flow
}

func startStallProxy(t testing.TB, amqpURL string) *stallProxy {
	t.Helper()
	p := &stallProxy{flow: make(chan struct{})}
	close(p.flow)
	p.Proxy = rabbitmqtest.StartProxyWith(t, amqpURL, p.forward)
	t.Cleanup(p.resume) // before the proxy's own cleanup: a stalled forward ends
	return p
}

func (p *stallProxy) forward(c, b net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		flow := p.flow
		p.mu.Unlock()
		<-flow
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := b.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flow = make(chan struct{})
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flow:
	default:
		close(p.flow)
	}
}
