package rabbitmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
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
)

func newSender(t testing.TB, url, exchange string) *rabbitmq.Sender {
	t.Helper()
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: url, Exchange: exchange}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// requirePostOrder checks that each post's deliveries come in outbox id
// order (a resend of the same event may follow itself) and returns how
// often each event id came.
func requirePostOrder(t *testing.T, ds []amqp.Delivery, rows []outbox.Message) map[string]int {
	t.Helper()
	idOf := map[string]int64{}
	for _, m := range rows {
		idOf[m.EventID] = m.ID
	}
	seen := map[string]int{}
	last := map[string]int64{}
	for _, d := range ds {
		id, ok := idOf[d.MessageId]
		require.True(t, ok, "unknown event id %s", d.MessageId)
		require.GreaterOrEqual(t, id, last[d.RoutingKey], "post %s: event %d after %d", d.RoutingKey, id, last[d.RoutingKey])
		last[d.RoutingKey] = id
		seen[d.MessageId]++
	}
	return seen
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

func TestUnreachableBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	p := rabbitmqtest.StartProxy(t, url)
	p.Cut()
	s := newSender(t, p.URL, rabbitmqtest.Name("posting-events"))
	m, err := outbox.NewMessage(eventtest.Outbox(t, event.PostingEvent, 1, time.Now(), map[string]any{"action": "CREATED"}))
	require.NoError(t, err)
	errs := s.Send(context.Background(), []outbox.Message{*m})
	require.ErrorIs(t, errs[0], relay.ErrUnavailable)
	require.ErrorIs(t, s.Ping(context.Background()), relay.ErrUnavailable)
}

// TestRejectedMessageFailsAfterItsRetries sends an event the broker
// refuses, in the two ways it can: returned (no queue bound to the
// exchange) and nacked (the only bound queue is full, x-max-length 0 with
// x-overflow reject-publish). Either way the row ends FAIL after 1 + retries
// attempts, with the broker's reason.
func TestRejectedMessageFailsAfterItsRetries(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	for _, c := range []struct {
		name, reason string
		queueArgs    amqp.Table // nil: no queue bound
	}{
		{"unroutable", "NO_ROUTE", nil},
		{"nack", "nack for event", amqp.Table{"x-max-length": 0, "x-overflow": "reject-publish"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			databasetest.Each(t, func(t *testing.T, db *database.DB) {
				exchange := rabbitmqtest.Name("posting-events")
				if c.queueArgs == nil {
					rabbitmqtest.DeleteAfter(t, url, exchange)
				} else {
					queue := rabbitmqtest.Name("full")
					rabbitmqtest.DeleteAfter(t, url, exchange, queue)
					ch := rabbitmqtest.Channel(t, url)
					require.NoError(t, rabbitmq.DeclareExchange(ch, exchange))
					_, err := ch.QueueDeclare(queue, true, false, false, false, c.queueArgs)
					require.NoError(t, err)
					require.NoError(t, ch.QueueBind(queue, "#", exchange, false, nil))
				}
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
				require.Contains(t, *got.LastError, c.reason)
			})
		})
	}
}

// observer collects what must not happen in a healthy run.
type observer struct {
	mu          sync.Mutex
	errs        []string
	bad         relay.Result
	unavailable int
}

func (o *observer) observe(name string) func(relay.Result, time.Duration, error) {
	return func(res relay.Result, _ time.Duration, err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if err != nil {
			o.errs = append(o.errs, fmt.Sprintf("%s: %v", name, err))
		}
		if res.Unavailable {
			o.unavailable++
		}
		o.bad.Retried += res.Retried
		o.bad.Failed += res.Failed
		o.bad.Recovered += res.Recovered
		o.bad.RecoveredFailed += res.RecoveredFailed
		o.bad.Fenced += res.Fenced
	}
}

func TestFourRelaysDeliverEveryEventOnceInPostOrder(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	for _, dialect := range databasetest.Dialects {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			const instances, perPost = 4, 5
			posts, batch := 2000, 500
			if dialect == database.SQLite {
				// One file serializes every write: fewer events prove the
				// same there (see relay's Kafka test).
				posts, batch = 400, 25
			}
			exchange := rabbitmqtest.Name("posting-events")
			queue := rabbitmqtest.BoundQueue(t, url, exchange)
			pools := relaytest.OpenPools(t, dialect, "rabbit", instances)
			rows := relaytest.Seed(t, pools[0].DB, posts, perPost, time.Now().Add(-time.Second))

			var o observer
			for i, db := range pools {
				r, err := relay.New(outbox.NewStore(db), newSender(t, url, exchange), relay.Config{
					InstanceID: fmt.Sprintf("relay-%d", i), Interval: 20 * time.Millisecond, BatchSize: batch,
					Logger: slog.New(slog.DiscardHandler), Observe: o.observe(fmt.Sprintf("relay-%d", i)),
				})
				require.NoError(t, err)
				require.NoError(t, r.Start(context.Background()))
				t.Cleanup(r.Stop)
			}
			require.Eventually(t, func() bool {
				return relaytest.CountByStatus(t, pools[0].DB)[outbox.StatusSent] == int64(len(rows))
			}, 3*time.Minute, 50*time.Millisecond)

			ds := rabbitmqtest.Read(t, url, queue, len(rows), time.Minute)
			require.Len(t, ds, len(rows), "every event exactly once")
			seen := requirePostOrder(t, ds, rows)
			require.Len(t, seen, len(rows))
			for eid, n := range seen {
				require.Equal(t, 1, n, "event %s delivered %d times", eid, n)
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			require.Empty(t, o.errs)
			require.Equal(t, relay.Result{}, o.bad, "retried, failed, recovered or fenced rows")
		})
	}
}

func TestConnectionsCutFor15sSpendNoRetries(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange := rabbitmqtest.Name("posting-events")
		queue := rabbitmqtest.BoundQueue(t, url, exchange)
		proxy := rabbitmqtest.StartProxy(t, url)
		rows := relaytest.Seed(t, db.DB, 50, 20, time.Now().Add(-time.Second)) // 1,000 events

		var o observer
		r, err := relay.New(outbox.NewStore(db), newSender(t, proxy.URL, exchange), relay.Config{
			InstanceID: "relay-cut", Interval: 50 * time.Millisecond, BatchSize: 20, OutageBackoffMax: time.Second,
			Logger: slog.New(slog.DiscardHandler), Observe: o.observe("relay-cut"),
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)

		// Cut once some, but not all, have gone.
		require.Eventually(t, func() bool {
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] >= 100
		}, time.Minute, 5*time.Millisecond)
		proxy.Cut()
		cutAt := time.Now()
		require.Eventually(t, func() bool {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.unavailable > 0
		}, 30*time.Second, 10*time.Millisecond, "the relay noticed the outage")
		sentDuringCut := relaytest.CountByStatus(t, db.DB)[outbox.StatusSent]
		require.Less(t, sentDuringCut, int64(len(rows)), "the cut came too late to matter")
		time.Sleep(15*time.Second - time.Since(cutAt)) // the outage itself lasts 15 s
		require.Equal(t, sentDuringCut, relaytest.CountByStatus(t, db.DB)[outbox.StatusSent], "nothing sent while cut")
		proxy.Restore(t)

		require.Eventually(t, func() bool {
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, time.Minute, 50*time.Millisecond)
		r.Stop()
		var spent int64
		require.NoError(t, db.DB.Model(&outbox.Message{}).Select("COALESCE(SUM(retry_count), 0)").Scan(&spent).Error)
		require.Zero(t, spent, "retries spent by the outage")
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))

		ds := rabbitmqtest.Read(t, url, queue, len(rows), time.Minute)
		seen := requirePostOrder(t, ds, rows)
		require.Len(t, seen, len(rows), "every event delivered")
		o.mu.Lock()
		defer o.mu.Unlock()
		require.Empty(t, o.errs)
		require.Equal(t, relay.Result{}, o.bad, "retried, failed, recovered or fenced rows")
	})
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

func startStallProxy(t *testing.T, amqpURL string) *stallProxy {
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

// A broker that stops reading (a resource alarm blocks publishers) must not
// hold Send past SendTimeout: the relay's stale limit is checked against
// that bound, so a Send that outlasts it lets other relays recover live
// claims and spend their attempts. Every message is unavailable instead.
func TestSendIsBoundedWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	amqpURL := rabbitmqtest.URL(t)
	exchange := rabbitmqtest.Name("posting-events")
	rabbitmqtest.DeleteAfter(t, amqpURL, exchange)
	rabbitmqtest.BoundQueue(t, amqpURL, exchange)
	proxy := startStallProxy(t, amqpURL)
	// A long heartbeat: neither side gives up on the silent connection
	// before the test has its answer.
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: proxy.URL, Exchange: exchange, SendTimeout: 2 * time.Second,
		DialTimeout: time.Second, Heartbeat: time.Minute}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.resume(); _ = s.Close() })
	require.NoError(t, s.Ping(context.Background()))

	// More than the socket buffers on both sides of the proxy hold.
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = reservationLike(t, int64(i+1))
		msgs[i].Payload = strings.Repeat("x", 32<<10)
	}
	proxy.stall()
	done := make(chan []error, 1)
	go func() { done <- s.Send(context.Background(), msgs) }()
	select {
	case errs := <-done:
		for i, err := range errs {
			require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
			require.False(t, errors.Is(err, rabbitmq.ErrRejected), "message %d", i)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Send still blocked 30s after its 2s SendTimeout while the broker does not read")
	}

	// Once the broker reads again, the sender is back on a new connection.
	proxy.resume()
	require.Eventually(t, func() bool {
		for _, err := range s.Send(context.Background(), []outbox.Message{reservationLike(t, 1)}) {
			if err != nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
}
