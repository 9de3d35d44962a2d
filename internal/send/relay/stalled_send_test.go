package relay_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// stallingDialer dials brokers for a producer and holds the first Produce
// request it sees on the path for hold, as a stalled network does: the
// write neither fails nor arrives. Its bytes go on afterwards unless the
// connection was closed meanwhile. entered is closed when the request is
// caught, done when it has arrived or been dropped (arrived tells which).
type stallingDialer struct {
	hold    time.Duration
	once    sync.Once
	entered chan struct{}
	done    chan struct{}
	arrived bool
}

func newStallingDialer(hold time.Duration) *stallingDialer {
	return &stallingDialer{hold: hold, entered: make(chan struct{}), done: make(chan struct{})}
}

func (d *stallingDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &stallingConn{Conn: c, d: d, closed: make(chan struct{})}, nil
}

type stallingConn struct {
	net.Conn
	d         *stallingDialer
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *stallingConn) Write(p []byte) (int, error) {
	// A request: int32 size, int16 api key (0 is Produce).
	if len(p) < 6 || binary.BigEndian.Uint16(p[4:6]) != 0 {
		return c.Conn.Write(p)
	}
	caught := false
	c.d.once.Do(func() { caught = true })
	if !caught {
		return c.Conn.Write(p)
	}
	close(c.d.entered)
	defer close(c.d.done)
	select {
	case <-time.After(c.d.hold):
	case <-c.closed:
		return 0, net.ErrClosed // torn down: the bytes never reach the broker
	}
	// The path delivers them late, whatever deadline the client had set.
	if err := c.Conn.SetWriteDeadline(time.Time{}); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	c.d.arrived = err == nil
	return n, err
}

func (c *stallingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// closingSender is a relay.Sender the test closes when its relay is done.
type closingSender interface {
	relay.Sender
	Close() error
}

// raceAStalledRelay seeds a few posts' events, starts a relay sending
// through stalled (its first send stalls: entered is closed then), then,
// once it stalls, a second through healthy, and returns the rows once every
// one is SENT and the stall has ended (done), both relays stopped and both
// senders closed. No attempt may be spent.
func raceAStalledRelay(t *testing.T, db *database.DB, stalled, healthy closingSender, entered, done <-chan struct{}) []outbox.Message {
	t.Helper()
	ctx := context.Background()
	newRelay := func(id string, s relay.Sender) *relay.Relay {
		r, err := relay.New(outbox.NewStore(db), s, relay.Config{InstanceID: id, Interval: 20 * time.Millisecond,
			OutageBackoffMax: 100 * time.Millisecond, StaleAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		return r
	}
	rows := relaytest.Seed(t, db.DB, 4, 3, time.Now().Add(-time.Second))
	a := newRelay("a", stalled)
	require.NoError(t, a.Start(ctx))
	<-entered
	b := newRelay("b", healthy)
	require.NoError(t, b.Start(ctx))
	require.Eventually(t, func() bool {
		return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
	}, time.Minute, 20*time.Millisecond)
	<-done
	a.Stop()
	b.Stop()
	require.NoError(t, stalled.Close())
	require.NoError(t, healthy.Close())
	var retried int64
	require.NoError(t, db.DB.Model(&outbox.Message{}).Where("retry_count > 0").Count(&retried).Error)
	require.Zero(t, retried, "a send without an answer spends no attempt")
	return rows
}

// delivery is a message as it arrived on the partition or queue, with the
// sequence and event id its headers carry.
type delivery struct {
	key     string
	headers map[string]string
	value   []byte
	seq     int64
	eventID string
}

// requireDeliveredInOrder checks the deliveries, in their order on the
// partition or queue: each post's events in sequence order (a copy right
// after itself, a resend inside the client, is harmless; an event after a
// later one of its post is not), n distinct events in all, and a worker on
// db handed them applies every event once and in order. note is added to
// the order failure.
func requireDeliveredInOrder(t *testing.T, db *database.DB, ds []delivery, n int, note string) {
	t.Helper()
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, d := range ds {
		require.GreaterOrEqual(t, d.seq, last[d.key], "post %s: event %d after %d %s", d.key, d.seq, last[d.key], note)
		last[d.key] = d.seq
		seen[d.eventID] = true
	}
	require.Len(t, seen, n, "all delivered")
	requireWorkerAppliesInOrder(t, db, ds)
}

// requireWorkerAppliesInOrder hands the deliveries, in their order on the
// partition or queue, to a worker on db, and checks that it applies every
// event once and no event of a post after a later one (by sequence).
func requireWorkerAppliesInOrder(t *testing.T, db *database.DB, ds []delivery) {
	t.Helper()
	var applied []inbox.Event
	var current inbox.Event
	w, err := worker.New(db.DB, worker.Config{Logger: slog.New(slog.DiscardHandler),
		ObserveConsumed: func(_, outcome string) {
			if outcome == worker.OutcomeProcessed {
				applied = append(applied, current)
			}
		}})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	for _, d := range ds {
		ev, err := inbox.Decode([]byte(d.key), d.headers, d.value)
		require.NoError(t, err)
		current = ev
		require.NoError(t, w.Handle(context.Background(), ev))
	}
	last := map[int64]int64{}
	ids := map[string]bool{}
	for _, ev := range applied {
		require.Greater(t, ev.Sequence, last[ev.PostID], "post %d: the worker applied event %d after %d", ev.PostID, ev.Sequence, last[ev.PostID])
		last[ev.PostID] = ev.Sequence
		require.False(t, ids[ev.EventID], "event %s applied twice", ev.EventID)
		ids[ev.EventID] = true
	}
}

// A send that got no answer within its timeout (the path to the broker
// stalled) must not hand its rows to another relay while its request may
// still land: the late copy of a post's event would follow a later event of
// the post on the partition. The rows stay PROCESSING until the producer
// has torn the request's connection down, then go back with no attempt
// spent; every post's events reach its partition in outbox order, each
// carrying its sequence (the row id) in ce_sequence and in the value.
func TestStalledSendKeepsPerPostOrderOnThePartition(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		broker := kafkatest.Start(t)
		stall := newStallingDialer(3 * time.Second)
		producer := func(dial kafka.DialFunc) *kafka.Producer {
			p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic,
				SendTimeout: time.Second, DialTimeout: 100 * time.Millisecond, RequestTimeout: 800 * time.Millisecond,
				AckTimeout: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, Dial: dial}, nil)
			require.NoError(t, err)
			return p
		}
		rows := raceAStalledRelay(t, db, producer(stall.Dial), producer(nil), stall.entered, stall.done)

		records := broker.Records(t, len(rows), 30*time.Second)
		ds := make([]delivery, len(records))
		for i, r := range records {
			seq, err := event.ParseSequence(r.Headers["ce_sequence"])
			require.NoError(t, err)
			var v struct {
				Sequence int64 `json:"sequence"`
			}
			require.NoError(t, json.Unmarshal(r.Value, &v))
			require.Equal(t, seq, v.Sequence, "header and value agree")
			ds[i] = delivery{key: r.Key, headers: r.Headers, value: r.Value, seq: seq, eventID: r.Headers[event.HeaderEventID]}
		}
		requireDeliveredInOrder(t, db, ds, len(rows), fmt.Sprintf("late copy arrived: %v", stall.arrived))
		require.False(t, stall.arrived, "the stalled request was torn down, not delivered")
	})
}

// healingDialer dials brokers for a producer whose route stalls at its
// first Produce request and heals after hold: from then on every
// connection's socket accepts what the client writes (the write returns)
// and nothing comes back, and after hold all of it reaches the broker, even
// on connections the client closed meanwhile (a real network delivers what
// the sending host already handed it). entered is closed when the route
// stalls, done once the held bytes were delivered (arrived) or could not
// be.
type healingDialer struct {
	hold    time.Duration
	entered chan struct{}
	done    chan struct{}
	arrived bool

	mu      sync.Mutex
	began   bool // the route stalled once
	stalled bool // it is stalled now
	conns   []*healingConn
}

func newHealingDialer(hold time.Duration) *healingDialer {
	return &healingDialer{hold: hold, entered: make(chan struct{}), done: make(chan struct{})}
}

func (d *healingDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hc := &healingConn{Conn: c, d: d}
	d.mu.Lock()
	d.conns = append(d.conns, hc)
	d.mu.Unlock()
	return hc, nil
}

// stall starts the stall at the first Produce request; it reports whether
// the route is stalled.
func (d *healingDialer) stall(p []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	// A request: int32 size, int16 api key (0 is Produce).
	if !d.began && len(p) >= 6 && binary.BigEndian.Uint16(p[4:6]) == 0 {
		d.began, d.stalled = true, true
		close(d.entered)
		go d.heal()
	}
	return d.stalled
}

// heal delivers every connection's held bytes after hold, then closes the
// connections the client closed, once the broker has read them.
func (d *healingDialer) heal() {
	defer close(d.done)
	time.Sleep(d.hold)
	d.mu.Lock()
	conns := d.conns
	d.mu.Unlock()
	arrived := false
	for _, c := range conns {
		c.mu.Lock()
		late := c.held
		c.mu.Unlock()
		if len(late) == 0 {
			continue
		}
		if err := c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
			continue
		}
		if _, err := c.Conn.Write(late); err == nil {
			arrived = true
		}
	}
	time.Sleep(500 * time.Millisecond) // the broker reads and applies them
	d.mu.Lock()
	d.stalled = false
	d.arrived = arrived
	d.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.healed = true
		closing := c.closing
		c.mu.Unlock()
		if closing {
			_ = c.Conn.Close()
		}
	}
}

type healingConn struct {
	net.Conn
	d *healingDialer

	mu      sync.Mutex
	held    []byte // written while the route was stalled
	closing bool   // the client closed; the network still delivers held
	healed  bool
}

func (c *healingConn) Write(p []byte) (int, error) {
	if !c.d.stall(p) {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return 0, net.ErrClosed
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

func (c *healingConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 && !c.healed {
		c.closing = true // heal closes it after the late delivery
		return nil
	}
	return c.Conn.Close()
}

// healedRouteProducer is a producer of broker with the stalled-send
// tests' short bounds, dialing through dial (nil: directly), transactional
// under txnID unless it is empty.
func healedRouteProducer(t *testing.T, broker *kafkatest.Broker, dial kafka.DialFunc, txnID string) *kafka.Producer {
	t.Helper()
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic,
		SendTimeout: time.Second, DialTimeout: 100 * time.Millisecond, RequestTimeout: 800 * time.Millisecond,
		AckTimeout: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, Dial: dial, TransactionalID: txnID}, nil)
	require.NoError(t, err)
	return p
}

// healedRouteDeliveries are records as deliveries, with their sequences.
func healedRouteDeliveries(t *testing.T, records []kafkatest.Record) []delivery {
	t.Helper()
	ds := make([]delivery, len(records))
	for i, r := range records {
		seq, err := event.ParseSequence(r.Headers["ce_sequence"])
		require.NoError(t, err)
		ds[i] = delivery{key: r.Key, headers: r.Headers, value: r.Value, seq: seq, eventID: r.Headers[event.HeaderEventID]}
	}
	return ds
}

// With the transactional producer (serve's default), a send whose route
// stalls and heals after the relay gave up on it is never committed: its
// requests, delivered 8 s later on every connection they were written to,
// are refused (an older epoch) or land in a transaction the broker aborts.
// A read_committed consumer reads every event exactly once, each post's in
// outbox order, on MariaDB, PostgreSQL and SQLite, and no attempt is spent.
func TestStalledThenHealedRouteKeepsPerPostOrderForReadCommittedConsumers(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		broker := kafkatest.Start(t)
		heal := newHealingDialer(8 * time.Second)
		rows := raceAStalledRelay(t, db, healedRouteProducer(t, broker, heal.Dial, "relay-a"),
			healedRouteProducer(t, broker, nil, "relay-b"), heal.entered, heal.done)
		require.True(t, heal.arrived, "the route healed and delivered the stalled requests")

		ds := healedRouteDeliveries(t, broker.Records(t, len(rows), 30*time.Second))
		requireDeliveredInOrder(t, db, ds, len(rows), "with transactions")
		require.Equal(t, len(rows), len(ds), "records read: no late copy")
	})
}

// Without transactions (POSTING_KAFKA_TRANSACTIONS=false), the same
// stalled-then-healed route leaves a late copy on the partition: the
// producer tears its connections down and the relay hands the rows back
// once sarama has returned, but the requests had left the host, so they
// reach the broker after the resend and often after the post's next event
// (the case README.md and design.md name; the log line counts them). What
// holds: no event overtakes an earlier event of its post (each event's
// first copy arrives in outbox order), the late arrival is a copy of an
// event already on the partition, with its event id and sequence, and the
// worker, fed the partition in order, applies every event once and in
// order. No attempt is spent.
func TestStalledThenHealedRouteWithoutTransactionsLeavesOnlyALateCopyTheWorkerDrops(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		broker := kafkatest.Start(t)
		heal := newHealingDialer(8 * time.Second)
		rows := raceAStalledRelay(t, db, healedRouteProducer(t, broker, heal.Dial, ""),
			healedRouteProducer(t, broker, nil, ""), heal.entered, heal.done)
		require.True(t, heal.arrived, "the route healed and delivered the stalled requests")

		// Every row once, and the late copy: wait until the partition
		// holds more records than rows.
		var records []kafkatest.Record
		require.Eventually(t, func() bool {
			records = broker.Records(t, len(rows)+1, 5*time.Second)
			return len(records) > len(rows)
		}, 30*time.Second, 100*time.Millisecond, "the late copy is on the partition")
		ds := healedRouteDeliveries(t, records)
		first := map[string]int64{} // post → sequence of the newest event's first copy
		seen := map[string]bool{}
		late, behind := 0, 0
		for _, d := range ds {
			if seen[d.eventID] {
				late++
				if d.seq < first[d.key] {
					behind++ // the case the docs name: after a later event of its post
				}
				continue
			}
			require.Greater(t, d.seq, first[d.key], "post %s: event %d first arrived after event %d", d.key, d.seq, first[d.key])
			first[d.key], seen[d.eventID] = d.seq, true
		}
		require.Len(t, seen, len(rows), "every event on the partition")
		require.Positive(t, late, "the healed route delivered a copy of an event already sent")
		t.Logf("%d late copies, %d of them after a later event of their post", late, behind)
		requireWorkerAppliesInOrder(t, db, ds)
	})
}

// holdingProxy stands between a sender and RabbitMQ and holds what the
// client writes from its first basic.publish on, for hold, then delivers
// it, whether the client has gone meanwhile or not: bytes on a stalled path
// still arrive. The broker's bytes flow back as they come. done is closed
// once the held bytes were delivered (or could not be).
type holdingProxy struct {
	URL     string
	hold    time.Duration
	once    sync.Once
	entered chan struct{}
	done    chan struct{}
}

func startHoldingProxy(t *testing.T, amqpURL string, hold time.Duration) *holdingProxy {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	p := &holdingProxy{hold: hold, entered: make(chan struct{}), done: make(chan struct{})}
	target := u.Host
	u.Host = ln.Addr().String()
	p.URL = u.String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = up.Close() })
			go func() { _, _ = io.Copy(c, up) }() // errors once the client is gone; up stays open
			go p.upstream(c, up)
		}
	}()
	return p
}

// basicPublish starts the method frame of basic.publish: frame type 1,
// channel, size, then class 60, method 40.
func basicPublish(b []byte) bool {
	return len(b) >= 11 && b[0] == 1 && bytes.Equal(b[7:11], []byte{0, 60, 0, 40})
}

func (p *holdingProxy) upstream(client, broker net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			caught := false
			if basicPublish(buf[:n]) {
				p.once.Do(func() { caught = true })
			}
			if caught {
				p.holdFrom(client, broker, append([]byte(nil), buf[:n]...))
				return
			}
			if _, werr := broker.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = broker.Close()
			return
		}
	}
}

// holdFrom keeps first and all that follows it from the client for hold,
// then writes it to the broker.
func (p *holdingProxy) holdFrom(client, broker net.Conn, first []byte) {
	close(p.entered)
	defer close(p.done)
	var mu sync.Mutex
	held := first
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			mu.Lock()
			held = append(held, buf[:n]...)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(p.hold)
	mu.Lock()
	late := append([]byte(nil), held...)
	mu.Unlock()
	_, _ = broker.Write(late)
}

// A publish held on the path to RabbitMQ past the sender's timeout still
// arrives after the sender closed its socket. The relay must not hand its
// rows to another instance until the broker can no longer take it (three
// heartbeats after the socket closed): every post's events reach the queue
// in outbox order, and a late copy, if any, comes before the post's next
// event, each carrying its sequence.
func TestStalledPublishKeepsPerPostOrderOnTheQueue(t *testing.T) {
	t.Parallel()
	amqpURL := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		exchange := rabbitmqtest.Name("posting-events")
		queue := rabbitmqtest.BoundQueue(t, amqpURL, exchange)
		proxy := startHoldingProxy(t, amqpURL, 3*time.Second)
		sender := func(u string) *rabbitmq.Sender {
			s, err := rabbitmq.NewSender(rabbitmq.Config{URL: u, Exchange: exchange, SendTimeout: time.Second,
				DialTimeout: 500 * time.Millisecond, Heartbeat: 2 * time.Second, ReconnectBase: 10 * time.Millisecond,
				ReconnectMax: 100 * time.Millisecond}, nil)
			require.NoError(t, err)
			return s
		}
		rows := raceAStalledRelay(t, db, sender(proxy.URL), sender(amqpURL), proxy.entered, proxy.done)

		read := rabbitmqtest.Read(t, amqpURL, queue, len(rows), 30*time.Second)
		require.GreaterOrEqual(t, len(read), len(rows))
		ds := make([]delivery, len(read))
		for i, d := range read {
			headers := map[string]string{}
			for k, v := range d.Headers {
				if s, ok := v.(string); ok {
					headers[k] = s
				}
			}
			seq, err := event.ParseSequence(headers["cloudEvents_sequence"])
			require.NoError(t, err)
			ds[i] = delivery{key: d.RoutingKey, headers: headers, value: d.Body, seq: seq, eventID: d.MessageId}
		}
		requireDeliveredInOrder(t, db, ds, len(rows), "")
	})
}
