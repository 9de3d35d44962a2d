// Package rabbitmqtest gives tests a RabbitMQ server with unique exchanges
// and queues, a reader of a queue, and a TCP proxy a test can cut.
package rabbitmqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event/eventtest"
)

// DefaultURL is the server tests use unless POSTING_TEST_RABBITMQ_URL is set.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the test server's URL after checking it answers; it skips t
// when it does not, or fails it with POSTING_TEST_REQUIRE_RABBITMQ=1.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("POSTING_TEST_RABBITMQ_URL")
	if u == "" {
		u = DefaultURL
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_RABBITMQ") == "1" {
			t.Fatalf("RabbitMQ at %s unreachable and POSTING_TEST_REQUIRE_RABBITMQ=1: %v", u, err)
		}
		t.Skipf("RabbitMQ at %s unreachable (set POSTING_TEST_RABBITMQ_URL, or POSTING_TEST_REQUIRE_RABBITMQ=1 to fail): %v", u, err)
	}
	_ = conn.Close()
	return u
}

// Name returns a name unique to this run, for an exchange or a queue.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// Channel opens a connection and a channel on url, closed after the test.
func Channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// DeleteAfter deletes the exchange and queues after the test (on a
// connection of its own: the test's may be closed by then).
func DeleteAfter(t testing.TB, url, exchange string, queues ...string) {
	t.Helper()
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Logf("cannot delete %s %v: %v", exchange, queues, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		if exchange != "" {
			_ = ch.ExchangeDelete(exchange, false, false)
		}
	})
}

// BoundQueue declares exchange (durable topic) and a durable classic queue
// bound to it with "#", both deleted after the test, and returns the queue.
func BoundQueue(t testing.TB, url, exchange string) string {
	t.Helper()
	queue := Name("q")
	DeleteAfter(t, url, exchange, queue)
	ch := Channel(t, url)
	require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(queue, "#", exchange, false, nil))
	return queue
}

// BoundExchange is where a test sends and reads back: the broker's URL, a
// fresh exchange name (prefix "posting-events") and a queue bound to it
// (BoundQueue).
func BoundExchange(t testing.TB) (url, exchange, queue string) {
	t.Helper()
	url = URL(t)
	exchange = Name("posting-events")
	return url, exchange, BoundQueue(t, url, exchange)
}

// Read consumes queue until n messages came or timeout passed, and returns
// them in queue order (acknowledged). It fails t if any message breaks the
// AsyncAPI contract (event/asyncapi.json: routing key, headers, value), as
// kafkatest.ReadTopic does for Kafka, so the document cannot drift from what
// the RabbitMQ sender publishes. ReadRaw skips the check.
func Read(t testing.TB, url, queue string, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	ds := ReadRaw(t, url, queue, n, timeout)
	msgs := make([]eventtest.Message, len(ds))
	for i, d := range ds {
		h := make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			h[k] = fmt.Sprint(v)
		}
		msgs[i] = eventtest.Message{Key: d.RoutingKey, Headers: h, Value: d.Body}
	}
	eventtest.RequireValid(t, msgs...)
	return ds
}

// ReadRaw is Read without the contract check, for messages that break it on
// purpose (a dead-lettered malformed message).
func ReadRaw(t testing.TB, url, queue string, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	ch := Channel(t, url)
	require.NoError(t, ch.Qos(1000, 0, false))
	tag := Name("reader")
	ds, err := ch.Consume(queue, tag, true, false, false, false, nil)
	require.NoError(t, err)
	defer func() { _ = ch.Cancel(tag, false) }()
	out, full := receive(ds, nil, n, time.After(timeout))
	if !full {
		return out
	}
	// Anything beyond n is a duplicate the caller wants to see.
	out, _ = receive(ds, out, math.MaxInt, time.After(200*time.Millisecond))
	return out
}

// receive appends what ds delivers to out until out holds limit deliveries
// (full), ds is closed or stop fires (not full).
func receive(ds <-chan amqp.Delivery, out []amqp.Delivery, limit int, stop <-chan time.Time) (_ []amqp.Delivery, full bool) {
	for len(out) < limit {
		select {
		case d, ok := <-ds:
			if !ok {
				return out, false
			}
			out = append(out, d)
		case <-stop:
			return out, false
		}
	}
	return out, true
}

// Proxy forwards TCP connections to a target; Cut closes every connection
// and refuses new ones until Restore.
type Proxy struct {
	// URL is the AMQP URL that goes through the proxy.
	URL    string
	addr   string
	target string

	// upstream carries the client's bytes to the broker (StartProxyWith).
	upstream func(client, broker net.Conn)

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	done  bool
}

// StartProxy starts a proxy in front of the host of amqpURL and returns it;
// it stops after the test.
func StartProxy(t testing.TB, amqpURL string) *Proxy {
	t.Helper()
	return StartProxyWith(t, amqpURL, nil)
}

// StartProxyWith is StartProxy whose connections carry the client's bytes
// to the broker with upstream, which returns when it is done with them
// (nil: copied as they come). The broker's bytes always flow back as they
// come. A test passes an upstream that stalls or holds what the client
// sends, to play a broker that stops reading.
func StartProxyWith(t testing.TB, amqpURL string, upstream func(client, broker net.Conn)) *Proxy {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if upstream == nil {
		upstream = func(client, broker net.Conn) { _, _ = io.Copy(broker, client) }
	}
	p := &Proxy{addr: ln.Addr().String(), target: u.Host, upstream: upstream, conns: map[net.Conn]struct{}{}}
	u.Host = p.addr
	p.URL = u.String()
	p.serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		p.done = true
		p.mu.Unlock()
		p.Cut()
	})
	return p
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 3*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil {
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { p.upstream(c, up); _ = up.Close(); _ = c.Close() }()
	go func() { _, _ = io.Copy(c, up); _ = up.Close(); _ = c.Close() }()
}

// Cut closes every connection through the proxy and stops listening.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Restore listens again on the same address.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done {
		return
	}
	var ln net.Listener
	var err error
	require.Eventually(t, func() bool {
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "listen again on %s", p.addr)
	p.serve(ln)
}

// FreshVhost creates a virtual host of its own on the test server with
// rabbitmqctl (nothing declared in it: a fresh broker as a deployment first
// meets it), grants the URL's user every permission on it, deletes it after
// the test, and returns the URL of it. Without a server, or without
// rabbitmqctl, the test is skipped, or failed with
// POSTING_TEST_REQUIRE_RABBITMQ=1.
func FreshVhost(t testing.TB) string {
	t.Helper()
	base := URL(t)
	u, err := url.Parse(base)
	require.NoError(t, err)
	vhost := Name("posting-test")
	ctl := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("rabbitmqctl %v: %w: %s", args, err, out)
		}
		return nil
	}
	if err := ctl("add_vhost", vhost); err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_RABBITMQ") == "1" {
			t.Fatalf("a fresh vhost needs rabbitmqctl on the server's host and POSTING_TEST_REQUIRE_RABBITMQ=1: %v", err)
		}
		t.Skipf("a fresh vhost needs rabbitmqctl on the server's host: %v", err)
	}
	t.Cleanup(func() { _ = ctl("delete_vhost", vhost) })
	require.NoError(t, ctl("set_permissions", "-p", vhost, u.User.Username(), ".*", ".*", ".*"))
	u.Path = "/" + vhost
	u.RawPath = "/" + url.PathEscape(vhost)
	return u.String()
}
