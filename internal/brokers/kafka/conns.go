package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errTornDown is what a connection set refuses dials with once torn down.
var errTornDown = errors.New("kafka producer connections torn down after a send got no answer")

// DialFunc opens a connection to a broker (ProducerConfig.Dial).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// connSet is the dialer of one sarama producer or franz-go client: it remembers every
// connection it opened, so that a send that got no answer within
// SendTimeout can be cut off for good (tearDown closes them all and
// refuses new ones). Bytes of the request still on their way then go
// nowhere, instead of landing after the relay has handed the rows to
// another instance, which would send them and the next events of their
// posts first.
type connSet struct {
	dial    DialFunc
	timeout time.Duration

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	down  bool
	// unanswered counts the produce requests written on the set's
	// connections whose response had not begun to come back when the
	// connection was closed (see trackedConn): each may still land.
	unanswered int
	// ends counts the EndTxn answers the set's franz-go client read
	// (the client's hook).
	ends endTxnAnswers
}

// endTxnAnswers is a franz-go hook (kgo.HookBrokerRead) counting the EndTxn
// responses its client read.
type endTxnAnswers struct{ answered atomic.Int64 }

func (a *endTxnAnswers) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.EndTxn) && err == nil {
		a.answered.Add(1)
	}
}

func newConnSet(dial DialFunc, timeout time.Duration) *connSet {
	if dial == nil {
		d := &net.Dialer{Timeout: timeout}
		dial = d.DialContext
	}
	return &connSet{dial: dial, timeout: timeout, conns: map[*trackedConn]struct{}{}}
}

// Dial is sarama's proxy.Dialer.
func (s *connSet) Dial(network, addr string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, addr)
}

// DialContext is franz-go's dialer (kgo.Dialer); the dial timeout bounds it.
func (s *connSet) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if s.isDown() {
		return nil, errTornDown
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c, err := s.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		_ = c.Close()
		return nil, errTornDown
	}
	tc := &trackedConn{Conn: c, set: s, produces: map[int32]struct{}{}}
	s.conns[tc] = struct{}{}
	return tc, nil
}

func (s *connSet) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// tearDown closes every connection and refuses new ones.
func (s *connSet) tearDown() {
	s.mu.Lock()
	s.down = true
	conns := s.conns
	s.conns = map[*trackedConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// unansweredProduces is how many produce requests were written on the
// set's connections, closed ones included, without an answer coming back:
// requests that may still land at the broker, or already did. Call it once
// the client is done with the set (closed, or torn down): a request still
// waiting for its answer on an open connection is counted only when that
// connection closes.
func (s *connSet) unansweredProduces() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unanswered
}

// trackedConn leaves its set when closed. It follows the Kafka protocol on
// the wire, without TLS (the producer has none): it notes the correlation
// id of each produce request written (api key 0) and drops it once a
// response with that id begins to arrive, so that on close the set knows
// whether a produce request went out and got no answer. sarama and
// franz-go each write a request in one Write.
type trackedConn struct {
	net.Conn
	set *connSet

	mu       sync.Mutex
	produces map[int32]struct{} // produce requests written, unanswered
	closed   bool
	head     [8]byte // a response's size and correlation id, as read so far
	headN    int
	skip     int64 // bytes left of the response body being read
}

// Write notes a produce request once any of it has left: a request
// written in part (a write timeout) counts too, since nobody can tell
// how much of it the network still carries.
func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	// A request: int32 size, int16 api key, int16 version, int32
	// correlation id.
	if n > 0 && len(p) >= 12 && binary.BigEndian.Uint16(p[4:6]) == 0 {
		c.mu.Lock()
		c.produces[int32(binary.BigEndian.Uint32(p[8:12]))] = struct{}{}
		c.mu.Unlock()
	}
	return n, err
}

// Read follows the responses as they come, and drops a produce request
// from the unanswered ones at the first bytes of its response: the broker
// has handled it.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := p[:n]; len(b) > 0; {
		if c.skip > 0 {
			k := int(min(c.skip, int64(len(b))))
			c.skip -= int64(k)
			b = b[k:]
			continue
		}
		k := copy(c.head[c.headN:], b)
		c.headN += k
		b = b[k:]
		if c.headN < len(c.head) {
			break
		}
		size := int32(binary.BigEndian.Uint32(c.head[0:4]))
		delete(c.produces, int32(binary.BigEndian.Uint32(c.head[4:8])))
		c.headN, c.skip = 0, max(int64(size)-4, 0)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.mu.Lock()
	unanswered := 0
	if !c.closed {
		c.closed = true
		unanswered = len(c.produces)
	}
	c.mu.Unlock()
	c.set.mu.Lock()
	delete(c.set.conns, c)
	c.set.unanswered += unanswered
	c.set.mu.Unlock()
	return c.Conn.Close()
}
