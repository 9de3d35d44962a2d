package relay_test

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
)

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
		sa, sb := sender(proxy.URL), sender(amqpURL)
		rows := raceAStalledRelay(t, db, sa, sb, proxy.entered, proxy.done)
		require.NoError(t, sa.Close())
		require.NoError(t, sb.Close())

		ds := rabbitmqtest.Read(t, amqpURL, queue, len(rows), 30*time.Second)
		require.GreaterOrEqual(t, len(ds), len(rows))
		last := map[string]int64{}
		seen := map[string]bool{}
		for _, d := range ds {
			seq, err := event.ParseSequence(d.Headers["cloudEvents_sequence"].(string))
			require.NoError(t, err)
			require.GreaterOrEqual(t, seq, last[d.RoutingKey], "post %s: event %d after %d", d.RoutingKey, seq, last[d.RoutingKey])
			last[d.RoutingKey] = seq
			seen[d.MessageId] = true
		}
		require.Len(t, seen, len(rows), "all delivered")
		keys, headers, values := make([]string, len(ds)), make([]map[string]string, len(ds)), make([][]byte, len(ds))
		for i, d := range ds {
			keys[i], values[i], headers[i] = d.RoutingKey, d.Body, map[string]string{}
			for k, v := range d.Headers {
				if s, ok := v.(string); ok {
					headers[i][k] = s
				}
			}
		}
		requireWorkerAppliesInOrder(t, db, keys, headers, values)
	})
}
