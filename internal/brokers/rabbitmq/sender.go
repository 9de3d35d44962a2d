// Package rabbitmq is the only package that knows amqp091: it sends outbox
// rows to RabbitMQ (Sender) and consumes them for the worker (Consumer).
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/turn"
	"github.com/postingsvc/posting/internal/send/relay"
)

// ErrRejected marks a message the broker refused: a nack, or a basic.return
// because no queue is bound for its routing key. It spends an attempt.
var ErrRejected = errors.New("rabbitmq rejected the message")

// errSenderClosed is what Send reports after Close: it says nothing about
// the message.
var errSenderClosed = fmt.Errorf("%w: rabbitmq sender closed", relay.ErrUnavailable)

// chunkSize bounds the messages published before their confirms are
// awaited. basic.return frames are handed to a buffered Go channel by the
// connection's reader, which blocks when it is full; a chunk never
// outgrows the buffer, so the reader never waits for us.
const chunkSize = 1024

// Sender publishes the relay's messages to a topic exchange with publisher confirms
// and mandatory. It implements relay.Sender, relay.Pinger and
// relay.SendBounder. It connects lazily (it can be built while the broker
// is down) and drops its connection after any failed send, reconnecting
// with backoff.
//
// One connection carries Config.Channels confirm channels (lanes). A batch
// is spread over them by routing key, so every message of one post goes
// through the same lane in the batch's order, and the lanes publish and
// await their confirms at the same time: the broker handles each channel
// in a process of its own, and works on several at once.
type Sender struct {
	cfg    Config
	logger *slog.Logger

	// turn holds one token while a send runs, so two batches are never in
	// flight at once (a late batch cannot overtake a resend of itself).
	turn turn.Turn

	mu        sync.Mutex
	conn      *amqp.Connection
	sock      net.Conn // conn's TCP socket, closed to end a stuck write
	lanes     []lane   // conn's confirm channels, Config.Channels of them
	closed    bool
	connected bool // logged the first connection
	redial    backoff.Backoff
	nextDial  time.Time // no dialing before this, after a failure
	dialErr   error     // why the last connection attempt failed
}

// lane is one confirm channel of the connection and the listener of the
// messages the broker returns on it.
type lane struct {
	ch      *amqp.Channel
	returns chan amqp.Return
}

// NewSender checks cfg and returns a sender that connects on its first
// Send or Ping.
func NewSender(cfg Config, logger *slog.Logger) (*Sender, error) {
	config.FillZero(&cfg, DefaultConfig())
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid rabbitmq config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Sender{
		cfg:    cfg,
		logger: logger,
		turn:   turn.New(),
		redial: backoff.Backoff{Base: cfg.ReconnectBase, Max: cfg.ReconnectMax},
	}, nil
}

// Config returns the sender's configuration with defaults filled in.
func (s *Sender) Config() Config { return s.cfg }

// SendBound is the longest a message of one Send may take to reach the
// broker: SendTimeout, then three heartbeats for a request that got no
// answer (see holdUnanswered). The relay refuses a stale limit below it.
func (s *Sender) SendBound() time.Duration { return s.cfg.SendBound() }

// SendBound is the SendBound of a Sender with this configuration, known
// before it connects: serve checks the relay's stale limit against it
// before it opens anything.
func (c Config) SendBound() time.Duration {
	config.FillZero(&c, DefaultConfig())
	return c.SendTimeout + settleAfter(c.Heartbeat)
}

// Send publishes msgs and awaits their confirms together, spread over the
// channels by routing key: the messages of one post go out in the order of
// msgs (the relay never hands it two of one post anyway), those of
// different posts at the same time. It returns one error per message: nil
// when confirmed; an error wrapping ErrRejected on a nack or a return; an
// error wrapping relay.ErrUnavailable when the connection or channel was
// lost, the broker could not be reached or SendTimeout passed. A message
// that was published and got no confirm may still land: its error is a
// *relay.UnansweredError, whose Settled closes once it no longer can.
func (s *Sender) Send(ctx context.Context, msgs []event.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	case <-ctx.Done():
		return relay.FailAll(errs, fmt.Errorf("%w: an earlier send still runs: %w", relay.ErrUnavailable, ctx.Err()))
	}
	conn, lanes, sock, err := s.channel(ctx)
	if err != nil {
		return relay.FailAll(errs, err)
	}
	// The client's writes ignore ctx: a broker that stops reading (a memory
	// or disk alarm blocks publishing connections) would hold a publish, and
	// so Send, past SendTimeout, which the relay's stale limit relies on.
	// At the deadline the socket is closed under it: the write fails, the
	// connection shuts down, and every message without a confirm is
	// unavailable.
	stop := context.AfterFunc(ctx, func() { _ = sock.Close() })
	defer stop()
	parts := spread(msgs, len(lanes))
	failed := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, idx := range parts {
		if len(idx) == 0 {
			continue
		}
		wg.Go(func() { failed[i] = s.sendLane(ctx, lanes[i], msgs, idx, errs) })
	}
	wg.Wait()
	// A failed lane drops the connection, but only once every lane is done:
	// a channel exception (a 403 or 404 on one routing key) closes that
	// channel alone, and dropping the connection at once would throw away
	// the other lanes' confirms too (unavailable, sent again). A lost
	// connection ends every lane by itself; the deadline closes the socket.
	if err := errors.Join(failed...); err != nil {
		s.disconnect(conn, err)
		s.holdUnanswered(errs)
	}
	return errs
}

// holdUnanswered turns the unavailable outcomes of a send whose connection
// was just dropped into *relay.UnansweredError: those messages were handed
// to the socket and got no confirm, so their bytes may still be on the path
// (a proxy or a stalled broker that holds them) and land later. The broker
// drops a connection it has heard nothing from for two heartbeats, after
// which nothing of it can land: Settled closes three heartbeats after the
// socket was closed, and the relay keeps the rows PROCESSING until then.
func (s *Sender) holdUnanswered(errs []error) {
	var settled chan struct{}
	for i, err := range errs {
		if err == nil || !errors.Is(err, relay.ErrUnavailable) || errors.Is(err, ErrRejected) {
			continue
		}
		if settled == nil {
			settled = make(chan struct{})
			time.AfterFunc(settleAfter(s.cfg.Heartbeat), func() { close(settled) })
		}
		errs[i] = &relay.UnansweredError{Err: err, Settled: settled}
	}
}

// settleAfter is how long after its socket is closed a request of the
// connection may still reach the broker: three heartbeats (the broker gives
// up on a silent connection after two).
func settleAfter(heartbeat time.Duration) time.Duration { return 3 * heartbeat }

// spread deals the indexes of msgs to n lanes by a hash of the routing key,
// keeping their order: two messages of one post share a lane, in order.
func spread(msgs []event.Message, n int) [][]int {
	parts := make([][]int, n)
	for i := range parts {
		parts[i] = make([]int, 0, (2*len(msgs)+n-1)/n)
	}
	for i, m := range msgs {
		k := fnv32a(m.Key) % uint32(n)
		parts[k] = append(parts[k], i)
	}
	return parts
}

// fnv32a is the 32-bit FNV-1a hash of s, without hash/fnv's allocation.
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// sendLane publishes the messages msgs[idx...] on l, in order and chunk by
// chunk, and writes their outcomes to errs at the same indexes. A non-nil
// result means the channel failed and the connection must be dropped; the
// messages of the lane after the failure are unavailable then, and wait
// for the next connection, in order, spending nothing.
func (s *Sender) sendLane(ctx context.Context, l lane, msgs []event.Message, idx []int, errs []error) error {
	sub := make([]event.Message, len(idx))
	for j, i := range idx {
		sub[j] = msgs[i]
	}
	subErrs := make([]error, len(idx))
	defer func() {
		for j, i := range idx {
			errs[i] = subErrs[j]
		}
	}()
	for start := 0; start < len(sub); start += chunkSize {
		end := min(start+chunkSize, len(sub))
		if err := s.sendChunk(ctx, l.ch, l.returns, sub[start:end], subErrs[start:end]); err != nil {
			relay.FailAll(subErrs[end:], err)
			return err
		}
	}
	return nil
}

// sendChunk publishes msgs and waits for each confirm, filling errs. A
// non-nil result means the channel failed and must be dropped; errs is
// filled then too: a message the broker answered keeps its answer (an ack
// is nil, a nack or a return a rejection), only the unanswered ones are
// unavailable. Reporting an acked message unanswered made the relay send it
// again, outside the crash window; reporting a nacked one unanswered spent
// no attempt on it.
func (s *Sender) sendChunk(ctx context.Context, ch *amqp.Channel, returns chan amqp.Return, msgs []event.Message, errs []error) error {
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	ids := make([]string, len(msgs)) // the message ids, which a return names
	now := time.Now().UTC()
	var lost error
	for i, m := range msgs {
		pub := publishing(m, now)
		ids[i] = pub.MessageId
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, s.cfg.Exchange, m.Key, true, false, pub)
		if err != nil {
			lost = fmt.Errorf("%w: publish to rabbitmq: %w", relay.ErrUnavailable, err)
			break
		}
		dcs[i] = dc
	}
	for i, dc := range dcs {
		var (
			ack bool
			err error
		)
		switch {
		case dc == nil: // not published
			errs[i] = lost
			continue
		case lost == nil:
			ack, err = dc.WaitContext(ctx)
		default:
			// The channel failed: take the answers already in, wait for
			// no more.
			select {
			case <-dc.Done():
				ack = dc.Acked()
			default:
				errs[i] = lost
				continue
			}
		}
		switch {
		case err != nil:
			lost = fmt.Errorf("%w: no confirm from rabbitmq: %w", relay.ErrUnavailable, err)
			errs[i] = lost
		case !ack && ch.IsClosed():
			// The library nacks what is pending when the channel closes.
			if lost == nil {
				lost = fmt.Errorf("%w: rabbitmq channel closed before the confirm", relay.ErrUnavailable)
			}
			errs[i] = lost
		case !ack:
			errs[i] = fmt.Errorf("%w: nack for event %s", ErrRejected, ids[i])
		}
	}
	// A return comes before the ack of its message, from the same reader,
	// so every return of an acked message of this chunk is in the buffer by
	// now.
	returned := map[string]amqp.Return{}
	for drained := false; !drained; {
		select {
		case r, ok := <-returns:
			if !ok {
				drained = true
				break
			}
			returned[r.MessageId] = r
		default:
			drained = true
		}
	}
	for i, id := range ids {
		if r, ok := returned[id]; ok && errs[i] == nil {
			errs[i] = fmt.Errorf("%w: returned by exchange %s with routing key %s: %d %s", ErrRejected, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
		}
	}
	return lost
}

// channel returns the open connection and its confirm channels, or opens
// them (connection, channels in confirm mode, the exchange's declaration,
// the return listeners) before ctx ends.
func (s *Sender) channel(ctx context.Context) (*amqp.Connection, []lane, net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, nil, errSenderClosed
	}
	if s.openLocked() {
		return s.conn, s.lanes, s.sock, nil
	}
	s.dropLocked()
	if wait := time.Until(s.nextDial); wait > 0 {
		// The broker's own reason stays in the answer until the next
		// attempt: a wrong password or a missing vhost is named, not
		// hidden behind the wait.
		return nil, nil, nil, fmt.Errorf("%w: rabbitmq unreachable, next connection attempt in %s (last attempt: %w)",
			relay.ErrUnavailable, wait.Round(time.Millisecond), s.dialErr)
	}
	conn, sock, lanes, err := s.open(ctx)
	if err != nil {
		s.nextDial = time.Now().Add(s.redial.Next())
		s.dialErr = err
		return nil, nil, nil, fmt.Errorf("%w: connect to rabbitmq %s: %w", relay.ErrUnavailable, config.RedactURL(s.cfg.URL), err)
	}
	s.redial.Reset()
	s.dialErr = nil
	s.conn, s.sock, s.lanes = conn, sock, lanes
	if !s.connected {
		s.connected = true
		s.logger.Info("rabbitmq sender connected", "url", config.RedactURL(s.cfg.URL), "exchange", s.cfg.Exchange, "channels", len(lanes))
	}
	return conn, lanes, sock, nil
}

// openLocked reports whether the connection and every lane are open.
func (s *Sender) openLocked() bool {
	if s.conn == nil || s.conn.IsClosed() {
		return false
	}
	for _, l := range s.lanes {
		if l.ch.IsClosed() {
			return false
		}
	}
	return len(s.lanes) > 0
}

// open dials (within DialTimeout) and opens the lanes before ctx ends: the
// channel RPCs have no timeout of their own, and a broker that stops
// reading after the handshake would hold them, with s.mu, until the
// heartbeat gives up, minutes later. At ctx's end the socket is closed
// under them.
func (s *Sender) open(ctx context.Context) (*amqp.Connection, net.Conn, []lane, error) {
	var sock net.Conn
	conn, err := dialConfig(s.cfg.URL, s.cfg.DialTimeout, s.cfg.Heartbeat, func(c net.Conn) { sock = c })
	if err != nil {
		return nil, nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = sock.Close() })
	defer stop()
	lanes := make([]lane, s.cfg.Channels)
	for i := range lanes {
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err == nil && i == 0 {
			err = DeclareExchange(ch, s.cfg.Exchange)
		}
		if err != nil {
			_ = conn.Close()
			return nil, nil, nil, err
		}
		lanes[i] = lane{ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, chunkSize))}
	}
	return conn, sock, lanes, nil
}

// dial opens a connection with a bounded TCP connect and handshake.
func dial(url string, timeout, heartbeat time.Duration) (*amqp.Connection, error) {
	return dialConfig(url, timeout, heartbeat, nil)
}

// dialConfig is dial that also hands the TCP socket to dialed, if set (under
// TLS, the socket beneath it).
func dialConfig(url string, timeout, heartbeat time.Duration, dialed func(net.Conn)) (*amqp.Connection, error) {
	dialTCP := amqp.DefaultDial(timeout)
	return amqp.DialConfig(url, amqp.Config{
		Heartbeat: heartbeat,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialTCP(network, addr)
			if err == nil && dialed != nil {
				dialed(c)
			}
			return c, err
		},
		Properties: amqp.Table{"connection_name": "posting"},
	})
}

// DeclareExchange declares the durable topic exchange both event types go
// to; declaring it again with the same arguments is a no-op.
func DeclareExchange(ch *amqp.Channel, name string) error {
	if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", name, err)
	}
	return nil
}

// disconnect drops conn if it is still the current connection, so the next
// send opens a new one.
func (s *Sender) disconnect(conn *amqp.Connection, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn {
		s.logger.Debug("rabbitmq sender drops its connection", "cause", cause)
		s.dropLocked()
	}
}

func (s *Sender) dropLocked() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn, s.sock, s.lanes = nil, nil, nil
}

// Ping returns nil when the broker answers: the connection is open, or a
// new one (within ProbeTimeout) could be opened.
func (s *Sender) Ping(ctx context.Context) error {
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	default:
		// A send runs: its outcome says more than a probe would.
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.conn != nil && !s.conn.IsClosed() {
			return nil
		}
		return fmt.Errorf("%w: rabbitmq connection not open", relay.ErrUnavailable)
	}
	// The probe's connection attempt ends with Ping: it must not keep s.mu
	// for the next Send.
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, _, err := s.channel(pctx)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-pctx.Done():
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", relay.ErrUnavailable, err)
		}
		return fmt.Errorf("%w: rabbitmq did not answer within %s", relay.ErrUnavailable, s.cfg.ProbeTimeout)
	}
}

// Close closes the connection after a running send ends (waiting up to
// SendTimeout). Later sends report every message unavailable. Safe twice.
func (s *Sender) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if release, ok := s.turn.Within(s.cfg.SendTimeout); ok {
		defer release()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
	return nil
}

var (
	_ relay.Sender      = (*Sender)(nil)
	_ relay.Pinger      = (*Sender)(nil)
	_ relay.SendBounder = (*Sender)(nil)
)
