package rabbitmq_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/send/relay/relaytest/sendertest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// openSender returns a sender of cfg, closed after the test.
func openSender(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Sender {
	t.Helper()
	s, err := rabbitmq.NewSender(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// connectedSender is openSender once it has connected (Ping).
func connectedSender(t testing.TB, cfg rabbitmq.Config) *rabbitmq.Sender {
	t.Helper()
	s := openSender(t, cfg)
	require.NoError(t, s.Ping(context.Background()))
	return s
}

func newSender(t testing.TB, url, exchange string) *rabbitmq.Sender {
	t.Helper()
	return openSender(t, rabbitmq.Config{URL: url, Exchange: exchange})
}

func TestSendPublishesTheContractMessage(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	s := newSender(t, url, exchange)

	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	msgs := reservationtest.Batch(t, at) // the second has no traceparent: no header
	tp := reservationtest.Traceparent
	before := time.Now().Add(-time.Second).Truncate(time.Second)
	errs := s.Send(context.Background(), relay.Envelopes(msgs))
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
// (internal/send/relay/relaytest/sendertest) on the RabbitMQ server, each case on its
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
	m, err := outbox.NewMessage(reservationtest.Outbox(t, event.PostingEvent, post, time.Now(), map[string]any{"action": "UPDATED"}))
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

// senderWith returns a sender that spreads batches over channels.
func senderWith(t testing.TB, url, exchange string, channels int) *rabbitmq.Sender {
	t.Helper()
	return openSender(t, rabbitmq.Config{URL: url, Exchange: exchange, Channels: channels})
}

// interleaved returns posts x perPost messages, every post's first event,
// then every post's second, ..., with ids in that order.
func interleaved(t testing.TB, posts, perPost int) []outbox.Message {
	t.Helper()
	var msgs []outbox.Message
	for round := range perPost {
		for p := 1; p <= posts; p++ {
			m, err := outbox.NewMessage(reservationtest.Outbox(t, event.PostingEvent, int64(p), time.Now(), map[string]any{"action": "UPDATED"}))
			require.NoError(t, err)
			m.ID = int64(round*posts + p)
			msgs = append(msgs, *m)
		}
	}
	return msgs
}

// TestSendOverSeveralChannelsKeepsPostOrder sends one batch holding twenty
// events of each of fifty posts over four channels: every message is
// confirmed, and on the queue each post's events keep the batch's order.
func TestSendOverSeveralChannelsKeepsPostOrder(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	s := senderWith(t, url, exchange, 4)
	msgs := interleaved(t, 50, 20)
	for i, err := range s.Send(context.Background(), relay.Envelopes(msgs)) {
		require.NoError(t, err, "message %d", i)
	}
	ds := rabbitmqtest.Read(t, url, queue, len(msgs), 30*time.Second)
	require.Len(t, ds, len(msgs))
	seen := sendertest.RequirePostOrder(t, arrivedAll(ds), msgs, false)
	require.Len(t, seen, len(msgs), "every event once")
}

// TestReturnsAreReportedOnEveryChannel binds the queue to the even posts
// only and sends one event of each of forty posts over four channels: the
// odd posts' messages come back returned, whichever channel carried them,
// and only those are rejections.
func TestReturnsAreReportedOnEveryChannel(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.Name("q")
	rabbitmqtest.DeleteAfter(t, url, exchange, queue)
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, rabbitmq.DeclareExchange(ch, exchange))
	_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	const posts = 40
	for p := 2; p <= posts; p += 2 {
		require.NoError(t, ch.QueueBind(queue, strconv.Itoa(p), exchange, false, nil))
	}
	s := senderWith(t, url, exchange, 4)
	msgs := interleaved(t, posts, 1)
	errs := s.Send(context.Background(), relay.Envelopes(msgs))
	for i, m := range msgs {
		if m.AggregateID%2 == 0 {
			require.NoError(t, errs[i], "post %d is bound", m.AggregateID)
		} else {
			require.ErrorIs(t, errs[i], rabbitmq.ErrRejected, "post %d is not bound", m.AggregateID)
			require.ErrorContains(t, errs[i], "NO_ROUTE")
		}
	}
	ds := rabbitmqtest.Read(t, url, queue, posts/2, 10*time.Second)
	require.Len(t, ds, posts/2)
	for _, d := range ds {
		p, err := strconv.Atoi(d.RoutingKey)
		require.NoError(t, err)
		require.Zero(t, p%2, "post %d delivered", p)
	}
	// Nothing else arrives.
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages)
}

func TestChannelsSetting(t *testing.T) {
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, s.Config().Channels, "default")
	for _, n := range []int{-1, 17} {
		_, err := rabbitmq.NewSender(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Channels: n}, nil)
		var ce *config.Error
		require.ErrorAs(t, err, &ce, "channels %d", n)
		require.Equal(t, "rabbitmq.Config.Channels", ce.Field)
	}
}

// laneOf is the lane the sender deals post's messages to out of n (the
// FNV-1a hash of the routing key, as sender.go's spread does).
func laneOf(post int64, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(strconv.FormatInt(post, 10)))
	return int(h.Sum32() % uint32(n))
}

// onePerPost returns one event for each of posts 1..n, ids in that order.
func onePerPost(t testing.TB, n int) []outbox.Message {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = reservationLike(t, int64(i+1))
		msgs[i].ID = int64(i + 1)
	}
	return msgs
}

// queued drains queue and returns how often each event id was on it. It
// reads at least want messages (or waits 10 s for them).
func queued(t *testing.T, url, queue string, want int) map[string]int {
	t.Helper()
	ch := rabbitmqtest.Channel(t, url)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	ds := rabbitmqtest.Read(t, url, queue, max(want, q.Messages), 10*time.Second)
	seen := map[string]int{}
	for _, d := range ds {
		seen[d.MessageId]++
	}
	return seen
}

// requireHonest checks each outcome against what reached the queue: a
// confirmed message is there, a rejected one is not, and everything else
// is unavailable (unknown; it may be there or not). It returns the
// unavailable messages, in order.
func requireHonest(t *testing.T, msgs []outbox.Message, errs []error, seen map[string]int) []outbox.Message {
	t.Helper()
	require.Len(t, errs, len(msgs))
	var again []outbox.Message
	for i, err := range errs {
		id := msgs[i].EventID
		switch {
		case err == nil:
			require.Positive(t, seen[id], "message %d (post %d) reported confirmed but not on the queue", i, msgs[i].AggregateID)
		case errors.Is(err, rabbitmq.ErrRejected):
			require.False(t, errors.Is(err, relay.ErrUnavailable), "message %d both rejected and unavailable: %v", i, err)
			require.Zero(t, seen[id], "message %d reported rejected but on the queue: %v", i, err)
		default:
			require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
			again = append(again, msgs[i])
		}
	}
	return again
}

// waitQueued waits until queue holds at least n messages: a send is under
// way.
func waitQueued(t *testing.T, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages >= n
	}, 30*time.Second, time.Millisecond)
}

// sendWithin runs Send and fails t if it outlasts its SendTimeout by far.
func sendWithin(t *testing.T, s *rabbitmq.Sender, msgs []outbox.Message) []error {
	t.Helper()
	done := make(chan []error, 1)
	go func() { done <- s.Send(context.Background(), relay.Envelopes(msgs)) }()
	select {
	case errs := <-done:
		return errs
	case <-time.After(s.SendBound() + 20*time.Second):
		t.Fatalf("Send still running 20 s after its SendTimeout %s", s.SendBound())
		return nil
	}
}

// needRabbitmqctl skips t where rabbitmqctl, which manages the local
// broker, is not installed (a broker in a container, say), and fails it
// then under POSTING_TEST_REQUIRE_RABBITMQ=1.
func needRabbitmqctl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_RABBITMQ") != "" {
			t.Fatalf("POSTING_TEST_REQUIRE_RABBITMQ is set but rabbitmqctl is not installed: %v", err)
		}
		t.Skipf("rabbitmqctl not installed (%v): this test changes the local broker's permissions", err)
	}
}

// requireResent sends again what was not confirmed, requires every resend
// confirmed, and every message of msgs on queue at least once, counting
// seen (what was on the queue before).
func requireResent(t *testing.T, s *rabbitmq.Sender, url, queue string, msgs, again []outbox.Message, seen map[string]int) {
	t.Helper()
	for i, err := range sendWithin(t, s, again) {
		require.NoError(t, err, "resend %d", i)
	}
	for id, c := range queued(t, url, queue, len(again)) {
		seen[id] += c
	}
	for i, m := range msgs {
		require.Positive(t, seen[m.EventID], "message %d never delivered", i)
	}
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
}

// A channel exception on one lane only: the broker refuses one post's
// routing key (a topic permission), which closes that lane's channel with
// 403 at the end of its part of the batch (20 messages: the refused one,
// written last, waits for a confirm the closed channel never gives) while
// the other lane publishes 1,000. The other lane's
// messages are all confirmed, nothing is reported confirmed that is not on
// the queue, nothing rejected, the refused message is unavailable; once
// the key is allowed again the next Send reconnects and delivers the rest.
func TestChannelExceptionOnOneLaneKeepsOutcomesHonest(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	needRabbitmqctl(t)
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.BoundQueue(t, url, exchange)
	const lanes = 2
	var msgs []outbox.Message
	var refused, refusedAt = int64(0), 0
	for p, on := int64(1), [lanes]int{}; on[0] < 1000 || on[1] < 20; p++ {
		l := laneOf(p, lanes)
		if on[l] == []int{1000, 20}[l] {
			continue
		}
		on[l]++
		if l == 1 && on[l] == 20 {
			refused, refusedAt = p, len(msgs)
		}
		m := reservationLike(t, p)
		m.ID = int64(len(msgs) + 1)
		msgs = append(msgs, m)
	}
	rabbitmqctl(t, "set_topic_permissions", "-p", "/", "guest", exchange, "^(?!"+strconv.FormatInt(refused, 10)+"$).*", ".*")
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "clear_topic_permissions", "-p", "/", "guest", exchange).Run() })
	s := openSender(t, rabbitmq.Config{URL: url, Exchange: exchange, Channels: lanes, SendTimeout: 10 * time.Second})

	errs := sendWithin(t, s, msgs)
	require.ErrorIs(t, errs[refusedAt], relay.ErrUnavailable)
	// The exception closed lane 1's channel only: lane 0 carries on, and
	// its messages are not lost with lane 1's (to be sent again).
	confirmed := 0
	for i, err := range errs {
		if laneOf(msgs[i].AggregateID, lanes) == 0 {
			require.NoError(t, err, "message %d on the healthy lane", i)
		}
		if err == nil {
			confirmed++
			continue
		}
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
	}
	seen := queued(t, url, queue, confirmed)
	again := requireHonest(t, msgs, errs, seen)

	rabbitmqctl(t, "clear_topic_permissions", "-p", "/", "guest", exchange)
	requireResent(t, s, url, queue, msgs, again, seen)
}

// The exchange is deleted while a batch is on its way over four lanes:
// each lane's next publish closes its channel with 404. Outcomes stay
// honest, and the next Send reconnects and declares the exchange again.
func TestExchangeDeletedMidBatchOverFourLanes(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	ch := rabbitmqtest.Channel(t, url)
	s := connectedSender(t, rabbitmq.Config{URL: url, Exchange: exchange, Channels: 4, SendTimeout: 10 * time.Second})

	msgs := onePerPost(t, 20000)
	done := make(chan []error, 1)
	go func() { done <- sendWithin(t, s, msgs) }()
	waitQueued(t, ch, queue, 100)
	require.NoError(t, ch.ExchangeDelete(exchange, false, false))
	errs := <-done
	unavailable := 0
	for _, err := range errs {
		if errors.Is(err, relay.ErrUnavailable) {
			unavailable++
		}
	}
	require.Positive(t, unavailable, "the deletion came too late")
	seen := queued(t, url, queue, 0)
	again := requireHonest(t, msgs, errs, seen)

	// The next Send declares the exchange again; the queue lost its
	// binding with it, so bind it anew before sending the rest.
	probe := reservationLike(t, 1)
	errs = sendWithin(t, s, []outbox.Message{probe})
	require.ErrorIs(t, errs[0], rabbitmq.ErrRejected, "no queue bound yet: returned")
	require.NoError(t, ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	require.NoError(t, ch.QueueBind(queue, "#", exchange, false, nil))
	// In batches of a relay's size, so that a loaded machine does not
	// stretch one send of ten thousand messages past its bound.
	for start := 0; start < len(again); start += 2000 {
		chunk := again[start:min(start+2000, len(again))]
		errs = sendWithin(t, s, chunk)
		for i, err := range errs {
			require.NoError(t, err, "resend %d", start+i)
		}
	}
}

// The connection is cut in the middle of a batch of 5,000 messages over
// four lanes: Send returns, every message is confirmed (and on the queue)
// or unavailable, and after the network is back the unavailable ones go
// through.
func TestCutMidBatchOverFourLanes(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	ch := rabbitmqtest.Channel(t, url)
	proxy := rabbitmqtest.StartProxy(t, url)
	s := connectedSender(t, rabbitmq.Config{URL: proxy.URL, Exchange: exchange, Channels: 4, SendTimeout: 10 * time.Second,
		ReconnectBase: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})

	msgs := onePerPost(t, 5000)
	done := make(chan []error, 1)
	go func() { done <- sendWithin(t, s, msgs) }()
	waitQueued(t, ch, queue, 50)
	proxy.Cut()
	errs := <-done
	seen := queued(t, url, queue, 0)
	again := requireHonest(t, msgs, errs, seen)
	require.NotEmpty(t, again, "the cut came too late")

	proxy.Restore(t)
	require.Eventually(t, func() bool {
		return s.Ping(context.Background()) == nil
	}, 30*time.Second, 20*time.Millisecond)
	requireResent(t, s, url, queue, msgs, again, seen)
}

// Nacks and returns on several lanes in one batch: posts bound to a
// queue that refuses every message (x-max-length 0, reject-publish) are
// nacked, unbound posts are returned, the rest are confirmed, whichever
// of the four lanes carried them.
func TestNacksAndReturnsOnSeveralLanes(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	exchange := rabbitmqtest.Name("posting-events")
	okQ, fullQ := rabbitmqtest.Name("q"), rabbitmqtest.Name("full")
	rabbitmqtest.DeleteAfter(t, url, exchange, okQ, fullQ)
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, rabbitmq.DeclareExchange(ch, exchange))
	_, err := ch.QueueDeclare(okQ, true, false, false, false, nil)
	require.NoError(t, err)
	_, err = ch.QueueDeclare(fullQ, true, false, false, false, amqp.Table{"x-max-length": 0, "x-overflow": "reject-publish"})
	require.NoError(t, err)
	const posts, lanes = 3000, 4
	used := map[[2]int]bool{} // lane, kind
	for p := 1; p <= posts; p++ {
		switch p % 3 {
		case 0:
			require.NoError(t, ch.QueueBind(okQ, strconv.Itoa(p), exchange, false, nil))
		case 1:
			require.NoError(t, ch.QueueBind(fullQ, strconv.Itoa(p), exchange, false, nil))
		}
		used[[2]int{laneOf(int64(p), lanes), p % 3}] = true
	}
	require.Len(t, used, 3*lanes, "every lane carries every kind")
	s := senderWith(t, url, exchange, lanes)
	msgs := onePerPost(t, posts)
	errs := sendWithin(t, s, msgs)
	for i, m := range msgs {
		switch m.AggregateID % 3 {
		case 0:
			require.NoError(t, errs[i], "post %d", m.AggregateID)
		case 1:
			require.ErrorIs(t, errs[i], rabbitmq.ErrRejected, "post %d", m.AggregateID)
			require.ErrorContains(t, errs[i], "nack")
		case 2:
			require.ErrorIs(t, errs[i], rabbitmq.ErrRejected, "post %d", m.AggregateID)
			require.ErrorContains(t, errs[i], "NO_ROUTE")
		}
	}
	seen := queued(t, url, okQ, posts/3)
	require.Len(t, seen, posts/3)
	requireHonest(t, msgs, errs, seen)
	// The lanes are still good: the next Send uses them as they are.
	errs = sendWithin(t, s, onePerPost(t, 30))
	for i, err := range errs {
		require.Equal(t, (i+1)%3 != 0, err != nil, "post %d: %v", i+1, err)
	}
}

// Close, Ping and a second Send while a batch is on four lanes: nothing
// hangs or races, the first batch's outcomes stay honest, the second Send
// (which waits for the first, and Close with it) reports every message
// unavailable, as does any Send after Close.
func TestCloseAndPingDuringMultiLaneSend(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	ch := rabbitmqtest.Channel(t, url)
	s, err := rabbitmq.NewSender(rabbitmq.Config{URL: url, Exchange: exchange, Channels: 4, SendTimeout: 20 * time.Second}, nil)
	require.NoError(t, err)
	require.NoError(t, s.Ping(context.Background()))

	all := onePerPost(t, 6000)
	first, second := all[:4000], all[4000:]
	var wg sync.WaitGroup
	var errs1, errs2 []error
	wg.Go(func() { errs1 = sendWithin(t, s, first) })
	waitQueued(t, ch, queue, 10)
	wg.Go(func() { errs2 = sendWithin(t, s, second) })
	require.NoError(t, s.Ping(context.Background()), "a send runs on an open connection")
	require.NoError(t, s.Close())
	wg.Wait()
	for i, err := range errs2 {
		require.ErrorIs(t, err, relay.ErrUnavailable, "second send %d: Close came before its turn", i)
	}
	errs := append(errs1, errs2...)
	seen := queued(t, url, queue, 0)
	requireHonest(t, all, errs, seen)
	for i, err := range s.Send(context.Background(), relay.Envelopes(all[:3])) {
		require.ErrorIs(t, err, relay.ErrUnavailable, "after Close %d", i)
	}
	require.NoError(t, s.Close(), "twice")
}

// The broker blocks publishers (a memory alarm) while four lanes publish:
// Send still returns within its SendTimeout, every message is confirmed
// (and on the queue) or unavailable. It raises an alarm on the shared
// broker, which blocks every other publisher for a few seconds, so it runs
// only with POSTING_TEST_BROKER_ALARM=1 (the stall proxy of
// the sender suite's stalled-broker case, StalledBrokerCannotHoldASendPastItsBound, covers the same path).
func TestMemoryAlarmDuringMultiLaneSend(t *testing.T) {
	if os.Getenv("POSTING_TEST_BROKER_ALARM") != "1" {
		t.Skip("raises a memory alarm on the shared broker; set POSTING_TEST_BROKER_ALARM=1")
	}
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	ch := rabbitmqtest.Channel(t, url)
	s := connectedSender(t, rabbitmq.Config{URL: url, Exchange: exchange, Channels: 4, SendTimeout: 3 * time.Second,
		Heartbeat: time.Minute})
	t.Cleanup(func() { rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4") })

	msgs := onePerPost(t, 20000)
	done := make(chan []error, 1)
	start := time.Now()
	go func() { done <- sendWithin(t, s, msgs) }()
	waitQueued(t, ch, queue, 10)
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.0000001")
	errs := <-done
	took := time.Since(start)
	rabbitmqctl(t, "set_vm_memory_high_watermark", "0.4")
	t.Logf("Send took %s", took)
	seen := queued(t, url, queue, 0)
	again := requireHonest(t, msgs, errs, seen)
	require.NotEmpty(t, again, "the alarm came too late")
	require.Eventually(t, func() bool {
		errs = s.Send(context.Background(), relay.Envelopes(again))
		for _, err := range errs {
			if err != nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
}

// handshakeProxy forwards the broker's bytes freely, and the client's only
// as long as they are frames of channel 0 (the connection's handshake and
// heartbeats): from the first frame on a channel it holds everything. The
// connection opens, then channel.open gets no answer, as from a broker or
// path that stops taking the client's data right after the handshake.
func startHandshakeProxy(t *testing.T, amqpURL string) string {
	t.Helper()
	return rabbitmqtest.StartProxyWith(t, amqpURL, holdAfterHandshake).URL
}

// holdAfterHandshake passes the client's frames of channel 0 to the broker
// and holds everything from the first frame on another channel.
func holdAfterHandshake(c, b net.Conn) {
	r := bufio.NewReader(c)
	head := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(r, head); err != nil {
		return
	}
	if _, err := b.Write(head); err != nil {
		return
	}
	for {
		hdr := make([]byte, 7) // type, channel, size
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		if binary.BigEndian.Uint16(hdr[1:3]) != 0 {
			_, _ = io.Copy(io.Discard, r) // held: never reaches the broker
			return
		}
		rest := make([]byte, binary.BigEndian.Uint32(hdr[3:7])+1) // payload, frame end
		if _, err := io.ReadFull(r, rest); err != nil {
			return
		}
		if _, err := b.Write(append(hdr, rest...)); err != nil {
			return
		}
	}
}

// Opening the lanes is part of Send and bounded by SendTimeout like the
// rest: when channel.open gets no answer after the handshake, Send
// reports every message unavailable at the deadline instead of waiting
// for the heartbeat, and a Ping stuck the same way does not hold the next
// Send past its deadline either.
func TestSendIsBoundedWhenOpeningTheLanesHangs(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	proxied := startHandshakeProxy(t, url)
	s := openSender(t, rabbitmq.Config{URL: proxied, Exchange: rabbitmqtest.Name("posting-events"), Channels: 4,
		SendTimeout: 2 * time.Second, DialTimeout: time.Second, ProbeTimeout: 500 * time.Millisecond, Heartbeat: time.Minute,
		ReconnectBase: time.Millisecond, ReconnectMax: 2 * time.Millisecond})

	for i, err := range sendWithin(t, s, onePerPost(t, 10)) {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
	}
	// A Ping that dials (past the reconnect pause) and gets no answer.
	require.Eventually(t, func() bool {
		err := s.Ping(context.Background())
		require.ErrorIs(t, err, relay.ErrUnavailable)
		return strings.Contains(err.Error(), "did not answer")
	}, 10*time.Second, time.Millisecond)
	for i, err := range sendWithin(t, s, onePerPost(t, 10)) {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
	}
}

// Two Sends at once over four lanes: the second waits for the first, and
// every message of both is confirmed and on the queue once.
func TestTwoSendsAtOnceOverFourLanes(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	s := senderWith(t, url, exchange, 4)
	all := onePerPost(t, 4000)
	var wg sync.WaitGroup
	var errs1, errs2 []error
	wg.Go(func() { errs1 = sendWithin(t, s, all[:2000]) })
	wg.Go(func() { errs2 = sendWithin(t, s, all[2000:]) })
	wg.Wait()
	for i, err := range append(errs1, errs2...) {
		require.NoError(t, err, "message %d", i)
	}
	seen := queued(t, url, queue, len(all))
	require.Len(t, seen, len(all))
	for id, c := range seen {
		require.Equal(t, 1, c, "event %s", id)
	}
}

// A configuration's SendBound is its sender's, known before any connection:
// serve checks the relay's stale limit against it before it opens anything.
func TestConfigSendBoundIsTheSenders(t *testing.T) {
	t.Parallel()
	cfg := rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x", SendTimeout: 7 * time.Second, Heartbeat: 2 * time.Second}
	s, err := rabbitmq.NewSender(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, 13*time.Second, cfg.SendBound(), "the send timeout and three heartbeats")
	require.Equal(t, s.SendBound(), cfg.SendBound())
	def, err := rabbitmq.NewSender(rabbitmq.Config{URL: cfg.URL, Exchange: "x"}, nil)
	require.NoError(t, err)
	require.Equal(t, def.SendBound(), rabbitmq.Config{URL: cfg.URL}.SendBound(), "the defaults fill a zero")
}
