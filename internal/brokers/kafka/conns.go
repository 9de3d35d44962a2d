package kafka

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
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
	conns map[net.Conn]struct{}
	down  bool
}

func newConnSet(dial DialFunc, timeout time.Duration) *connSet {
	if dial == nil {
		d := &net.Dialer{Timeout: timeout}
		dial = d.DialContext
	}
	return &connSet{dial: dial, timeout: timeout, conns: map[net.Conn]struct{}{}}
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
	s.conns[c] = struct{}{}
	return &trackedConn{Conn: c, set: s}, nil
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
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c.Conn)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
