package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/relay"
)

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
