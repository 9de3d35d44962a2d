package kafka

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// unansweredTestConns dials brokers directly and remembers every
// connection, so a test can tell whether all of them were closed.
type unansweredTestConns struct {
	mu    sync.Mutex
	conns []*unansweredTestConn
}

type unansweredTestConn struct {
	net.Conn
	mu     sync.Mutex
	closed bool
}

func (c *unansweredTestConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

func (d *unansweredTestConns) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &unansweredTestConn{Conn: c}
	d.mu.Lock()
	d.conns = append(d.conns, tc)
	d.mu.Unlock()
	return tc, nil
}

// open counts the connections not closed yet.
func (d *unansweredTestConns) open() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.conns {
		c.mu.Lock()
		if !c.closed {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// unansweredTestSwallowProduce makes the broker take produce requests and
// never answer them, as a broker or route that stalls after the request
// was written; the request could as well be written late. stop ends it.
func unansweredTestSwallowProduce(b *kafkatest.Broker) (stop func()) {
	silent := make(chan struct{})
	c := b.Cluster
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-silent:
			return nil, nil, false
		default:
			c.KeepControl()
			return nil, nil, true // no answer at all
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(silent) }) }
}

// unansweredTestConfig is an idempotent producer config whose sarama gives
// up on an unanswered request (its read timeout, every retry) well before
// Send's own bound: the error is sarama's, not Send's.
func unansweredTestConfig(addr string, dial DialFunc) ProducerConfig {
	return ProducerConfig{
		Brokers: []string{addr}, SendTimeout: 10 * time.Second,
		DialTimeout: 200 * time.Millisecond, RequestTimeout: 300 * time.Millisecond, AckTimeout: 100 * time.Millisecond,
		Retries: 1, RetryBackoff: 10 * time.Millisecond, Dial: dial,
	}
}

// The CI flake of the sender suite's stalled-broker case on the idempotent
// producer, made deterministic: sarama itself gives up on a produce request
// it wrote and got no answer to (read tcp ...: i/o timeout), before Send's
// bound. That request may still land, so every message must be a
// *relay.UnansweredError, not a plain unavailable one the relay releases at
// once for a resend that a late copy could follow, after the post's next
// event. Settled closes once sarama has returned and every connection of
// the producer is closed: nothing more can land from it.
func TestProducerSaramaTimeoutAfterAWrittenRequestIsUnanswered(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	var dialed unansweredTestConns
	cfg := unansweredTestConfig(b.Addr, dialed.Dial)
	p := producerTestNew(t, cfg)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(1, 2, 1, 2))))

	stop := unansweredTestSwallowProduce(b)
	start := time.Now()
	errs := p.Send(context.Background(), relay.Envelopes(producerTestMessages(10, 4, 1, 2)))
	took := time.Since(start)
	require.Less(t, took, cfg.SendTimeout/2, "sarama gave up, not Send's bound")
	var settled <-chan struct{}
	for i, err := range errs {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		var unanswered *relay.UnansweredError
		require.ErrorAs(t, err, &unanswered, "message %d: written, no answer, it may still land: %v", i, err)
		require.NotNil(t, unanswered.Settled, "message %d", i)
		settled = unanswered.Settled
	}
	select {
	case <-settled:
	case <-time.After(cfg.SendTimeout):
		t.Fatal("Settled still open a send bound after sarama returned")
	}
	require.Zero(t, dialed.open(), "a connection of the producer was still open when Settled closed")

	stop()
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(20, 2, 1, 2))))
}

// The same through a relay: the rows of a send that sarama gave up on
// after writing it are held PROCESSING (Result.Held), not released for a
// resend at once; once the send has settled the next poll releases them,
// with no attempt spent, and they are sent.
func TestProducerSaramaTimeoutHoldsTheRelaysRowsUntilSettled(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	db := databasetest.NewSQLite(t)
	p := producerTestNew(t, unansweredTestConfig(b.Addr, nil))
	r, err := relay.New(outbox.NewStore(db), p, relay.Config{InstanceID: "held", Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := context.Background()

	rows := relaytest.Seed(t, db.DB, 3, 1, time.Now().Add(-time.Second))
	stop := unansweredTestSwallowProduce(b)
	res, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, len(rows), res.Claimed)
	require.Equal(t, len(rows), res.Held, "held until the send settles: %+v", res)
	require.Zero(t, res.Released, "released at once, for a resend a late copy could follow: %+v", res)
	require.Equal(t, map[outbox.Status]int64{outbox.StatusProcessing: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))

	stop()
	require.Eventually(t, func() bool {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
		return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
	}, 30*time.Second, 50*time.Millisecond)
	var spent int64
	require.NoError(t, db.DB.Model(&outbox.Message{}).Select("COALESCE(SUM(retry_count), 0)").Scan(&spent).Error)
	require.Zero(t, spent, "attempts spent")
}

// What could not have been written stays plain unavailable, released at
// once: a producer that never reached the broker, and one whose broker went
// down, from its second send on (its first may write the request on the
// connection it kept, which is in doubt). Outages hold no rows.
func TestProducerUnreachableBrokerIsNotUnanswered(t *testing.T) {
	t.Parallel()
	requireNotHeld := func(t *testing.T, errs []error) {
		t.Helper()
		for i, err := range errs {
			require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
			var unanswered *relay.UnansweredError
			require.False(t, errors.As(err, &unanswered), "message %d: nothing was written: %v", i, err)
		}
	}
	t.Run("NeverConnected", func(t *testing.T) {
		t.Parallel()
		b := kafkatest.Start(t)
		b.Stop()
		p := producerTestNew(t, unansweredTestConfig(b.Addr, nil))
		requireNotHeld(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(1, 2, 1, 2))))
	})
	t.Run("WentDown", func(t *testing.T) {
		t.Parallel()
		b := kafkatest.Start(t)
		p := producerTestNew(t, unansweredTestConfig(b.Addr, nil))
		producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(1, 2, 1, 2))))
		b.Stop()
		for i, err := range p.Send(context.Background(), relay.Envelopes(producerTestMessages(10, 2, 1, 2))) {
			require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		}
		for range 2 {
			requireNotHeld(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(20, 2, 1, 2))))
		}
	})
}
