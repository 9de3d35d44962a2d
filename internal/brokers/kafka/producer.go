package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/turn"
	"github.com/postingsvc/posting/internal/send/relay"
)

// errProducerClosed is what Send reports after Close. It wraps
// relay.ErrUnavailable: a closed producer says nothing about the message.
var errProducerClosed = fmt.Errorf("%w: kafka producer closed", relay.ErrUnavailable)

// Producer sends the relay's messages to Kafka. It implements
// relay.Sender. It connects lazily, so it can be built while the cluster
// is down, and it replaces its sarama producer after any failed send.
type Producer struct {
	cfg    ProducerConfig
	sconf  *sarama.Config
	pconf  *sarama.Config
	logger *slog.Logger

	// turn holds one token while a send runs. The send itself gives it back
	// when sarama is done, even after Send gave up waiting, so two
	// batches are never in flight at once: a late batch cannot overtake a
	// resend of itself or a later event of its key.
	turn turn.Turn

	mu        sync.Mutex
	sp        sarama.SyncProducer // nil until connected, or after a failure
	cl        *kgo.Client         // the same for a transactional producer (txn.go)
	conns     *connSet            // sp's or cl's connections
	closed    bool
	connected bool // logged the first connection

	// endTxn, when a test sets it, ends the transactional path's
	// transactions instead of the client's EndTransaction.
	endTxn func(context.Context, *kgo.Client, kgo.TransactionEndTry) error
}

// NewProducer checks cfg and returns a producer that connects on its first
// Send: it does not fail when the brokers are down.
func NewProducer(cfg ProducerConfig, logger *slog.Logger) (*Producer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid kafka producer config: %w", err)
	}
	sconf, err := cfg.saramaConfig()
	if err != nil {
		return nil, fmt.Errorf("invalid kafka producer config: %w", err)
	}
	pconf, err := cfg.probeConfig()
	if err != nil {
		return nil, fmt.Errorf("invalid kafka producer config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Producer{cfg: cfg, sconf: sconf, pconf: pconf, logger: logger, turn: turn.New()}, nil
}

// Config returns the producer's configuration with defaults filled in.
func (p *Producer) Config() ProducerConfig { return p.cfg }

// Send sends msgs to the topic under their keys (post ids), each header
// under its Kafka binding's name (headerKey), and waits until every
// message is acknowledged by all in-sync replicas or has failed. It returns
// one error per message, in order: nil when acknowledged; an error wrapping
// relay.ErrUnavailable when the cluster could not be reached or answered
// with a retriable error; a *relay.UnansweredError (which wraps it) on the
// idempotent path when sarama wrote a produce request and gave up waiting
// for its answer, since that request may still land; a
// *ProducerRejectedError when the broker (or sarama, before sending)
// refused that message.
//
// Send returns within SendTimeout, or sooner when ctx ends. When that
// bound passes first, every message is reported as a
// *relay.UnansweredError: some may still be written, so the producer tears
// down every connection of its sarama producer (the request can no longer
// land) and closes the error's Settled once sarama has returned; the relay
// keeps the rows PROCESSING until then. Calls are serialized; each one
// waits for the previous send.
func (p *Producer) Send(ctx context.Context, msgs []event.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	timer := time.NewTimer(p.cfg.SendTimeout)
	defer timer.Stop()
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return relay.FailAll(errs, fmt.Errorf("%w: %w", relay.ErrUnavailable, ctx.Err()))
	case <-timer.C:
		return relay.FailAll(errs, fmt.Errorf("%w: an earlier send still runs after %s", relay.ErrUnavailable, p.cfg.SendTimeout))
	}

	var abandoned atomic.Bool
	sendCtx, cancelSend := context.WithCancel(context.Background())
	done := make(chan []error, 1)
	settled := make(chan struct{})
	conns := make(chan *connSet, 1)
	go func() {
		defer close(settled)
		defer func() { <-p.turn }()
		defer cancelSend()
		if p.cfg.TransactionalID != "" {
			done <- p.sendTxn(sendCtx, msgs, &abandoned, conns)
			return
		}
		done <- p.send(p.saramaMessages(msgs), &abandoned, conns, settled)
	}()
	var why error
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		why = fmt.Errorf("%w: %w", relay.ErrUnavailable, ctx.Err())
	case <-timer.C:
		why = fmt.Errorf("%w: no answer within the send timeout %s", relay.ErrUnavailable, p.cfg.SendTimeout)
	}
	// No answer: the batch may still be on its way. Tear its connections
	// down so that it cannot land later, and tell the relay to hold the
	// rows until the send has ended (settled), not to release them now.
	abandoned.Store(true)
	cancelSend()
	select {
	case cs := <-conns:
		cs.tearDown()
	default:
		// Still connecting: send tears down what it opens (abandoned).
	}
	return relay.FailAll(errs, &relay.UnansweredError{Err: why, Settled: settled})
}

// saramaMessages are msgs as sarama messages, each with its index as
// Metadata (SendMessages reports failures by message, not index).
func (p *Producer) saramaMessages(msgs []event.Message) []*sarama.ProducerMessage {
	pms := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		hs := make([]sarama.RecordHeader, len(m.Headers))
		for j, h := range m.Headers {
			hs[j] = sarama.RecordHeader{Key: []byte(headerKey(h)), Value: []byte(h.Value)}
		}
		pms[i] = &sarama.ProducerMessage{
			Topic:    p.cfg.Topic,
			Key:      sarama.StringEncoder(m.Key),
			Value:    sarama.ByteEncoder(m.Value),
			Headers:  hs,
			Metadata: i,
		}
	}
	return pms
}

// send runs one batch through the sarama producer, connecting first if
// needed. It holds the turn; settled is closed once it has returned.
func (p *Producer) send(pms []*sarama.ProducerMessage, abandoned *atomic.Bool, connsOut chan<- *connSet, settled <-chan struct{}) []error {
	errs := make([]error, len(pms))
	sp, conns, err := p.connect()
	if err != nil {
		return relay.FailAll(errs, err)
	}
	connsOut <- conns
	if abandoned.Load() {
		conns.tearDown() // Send gave up while we connected
	}
	err = sp.SendMessages(pms)
	var perrs sarama.ProducerErrors
	switch {
	case err == nil:
	case errors.As(err, &perrs):
		for _, pe := range perrs {
			if i, ok := pe.Msg.Metadata.(int); ok && i >= 0 && i < len(errs) {
				errs[i] = producerClassify(pe.Err)
			}
		}
	default:
		relay.FailAll(errs, producerClassify(err))
	}
	if err != nil || abandoned.Load() || p.isClosed() {
		// After a failure sarama has bumped its idempotent epoch or holds
		// connections that just broke; a fresh producer (new producer id,
		// fresh metadata) is cheap and starts from a known state. A Close
		// that gave up waiting for this send leaves the closing to us.
		p.disconnect(sp, err)
	}
	if err != nil {
		// sarama has returned every message, so it retries none of them
		// any more, and its producer is closed. Close whatever connection
		// is left (sarama closes some asynchronously) before counting the
		// produce requests that got no answer.
		conns.tearDown()
		if conns.unansweredProduces() > 0 {
			holdUnanswered(errs, settled)
		}
	}
	return errs
}

// holdUnanswered turns the unavailable outcomes of a send that wrote a
// produce request and got no answer to it into *relay.UnansweredError.
// sarama gives up on such a request (its read timeout, a connection reset
// or closed after the write) and retries it, so a message's final error
// may even come from a later attempt that never reached the broker, and
// nothing tells which messages the unanswered request carried: every
// message not acknowledged nor refused is held. The request may still
// land; a resend released at once could then follow the post's next event.
// Held rows cost a delay only: settled closes as soon as send returns,
// every connection of the sarama producer being closed by then.
func holdUnanswered(errs []error, settled <-chan struct{}) {
	for i, err := range errs {
		if err != nil && errors.Is(err, relay.ErrUnavailable) {
			errs[i] = &relay.UnansweredError{Err: err, Settled: settled}
		}
	}
}

// connect returns the current sarama producer or builds one. Failing to build
// one means the cluster could not be reached.
func (p *Producer) connect() (sarama.SyncProducer, *connSet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errProducerClosed
	}
	if p.sp != nil {
		return p.sp, p.conns, nil
	}
	// Each sarama producer dials through a set of its own, which a send
	// without an answer tears down.
	conns := newConnSet(p.cfg.Dial, p.cfg.DialTimeout)
	sconf := *p.sconf
	sconf.Net.Proxy.Enable = true
	sconf.Net.Proxy.Dialer = conns
	sp, err := sarama.NewSyncProducer(p.cfg.Brokers, &sconf)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: connect to %s: %w", relay.ErrUnavailable, strings.Join(p.cfg.Brokers, ","), err)
	}
	p.sp, p.conns = sp, conns
	if !p.connected {
		p.connected = true
		p.logger.Info("kafka producer connected", "brokers", strings.Join(p.cfg.Brokers, ","), "topic", p.cfg.Topic, "client_id", p.cfg.ClientID)
	}
	return sp, conns, nil
}

func (p *Producer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// disconnect closes sp if it is still the current producer, so the next
// send builds a new one.
func (p *Producer) disconnect(sp sarama.SyncProducer, cause error) {
	p.mu.Lock()
	if p.sp == sp {
		p.sp, p.conns = nil, nil
	}
	p.mu.Unlock()
	if err := sp.Close(); err != nil {
		p.logger.Debug("kafka producer closed after a failed send", "cause", cause, "close_error", err)
	}
}

// Close waits up to SendTimeout for a running send, then closes the
// connections. Later Send calls report every message unavailable. It is
// safe to call more than once.
func (p *Producer) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	release, ok := p.turn.Within(p.cfg.SendTimeout)
	if !ok {
		// Closing under a running SendMessages would race it; the send
		// closes the producer itself when sarama returns.
		return fmt.Errorf("close kafka producer: a send still runs after %s", p.cfg.SendTimeout)
	}
	defer release()
	p.mu.Lock()
	sp, cl := p.sp, p.cl
	p.sp, p.cl, p.conns = nil, nil, nil
	p.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	if sp == nil {
		return nil
	}
	if err := sp.Close(); err != nil {
		return fmt.Errorf("close kafka producer: %w", err)
	}
	return nil
}

// SendBound is the longest one Send takes (SendTimeout): the relay
// refuses a stale limit that a healthy slow send could outlast.
func (p *Producer) SendBound() time.Duration { return p.cfg.SendTimeout }

// SendBound is the SendBound of a Producer with this configuration, known
// before it connects: serve checks the relay's stale limit against it
// before it opens anything.
func (c ProducerConfig) SendBound() time.Duration { return c.withDefaults().SendTimeout }

// fail the same way, so it spends one of the message's attempts.

var (
	_ relay.Sender = (*Producer)(nil)
	_ relay.Pinger = (*Producer)(nil)
)
