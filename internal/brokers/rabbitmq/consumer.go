package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/inbox/consume"
)

// Partition is the one pseudo-partition of a RabbitMQ queue: with a single
// active consumer the whole queue is owned by one worker at a time, which
// the worker hears as this partition being assigned and revoked.
const Partition int32 = 0

// probeType marks the probe messages a waiting consumer puts on its own
// queue. RabbitMQ does not tell an AMQP 0-9-1 consumer that it became the
// single active one; it just starts delivering. A waiting consumer's probe
// makes sure something is delivered: to the active consumer, which drops
// it, or, once the active one is gone, to the waiting one, which thereby
// learns it took over, even on an idle queue.
const probeType = "posting.active-consumer-probe"

// ConsumerConfig configures a Consumer. The zero value of every field but
// URL and Queue means its default.
type ConsumerConfig struct {
	// URL is the broker. Required.
	URL string
	// Exchange is the topic exchange the queue is bound to with "#"; the
	// consumer declares it too. Default DefaultExchange.
	Exchange string
	// Queue is the durable quorum queue (single active consumer) the
	// consumer declares and reads; "<Queue>.dead" receives malformed
	// messages. Required (the worker group).
	Queue string
	// Prefetch bounds the unacknowledged messages delivered at once. The
	// messages waiting together, up to inbox.MaxBatch (500), are handled
	// in one batch and acknowledged with one multiple ack after its commit;
	// the default, two batches, lets the next batch arrive while one
	// commits. Default 1000; 1 to 10000.
	Prefetch int
	// DialTimeout bounds opening the TCP connection. Default 3s; 100ms to 1m.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval. Default 10s; 1s to 1m.
	Heartbeat time.Duration
	// ProbeInterval is how often a waiting consumer probes whether it has
	// become the active one. Default 1s; 10ms to 1m.
	ProbeInterval time.Duration
	// ReconnectBase is the first pause after a lost or refused connection,
	// doubling (jittered) up to ReconnectMax. Default 250ms; 1ms to 1m.
	ReconnectBase time.Duration
	// ReconnectMax caps that pause. Default 30s; ReconnectBase to 10m.
	ReconnectMax time.Duration
	// RetryBase is the first pause before handling a message again after
	// the handler failed (the database is down), doubling up to RetryMax;
	// the queue does not move past it. Default 100ms; 1ms to 1m (the limits
	// of consume.RetryLimits, as for every broker's consumer).
	RetryBase time.Duration
	// RetryMax caps that pause. Default 5s; RetryBase to 10m.
	RetryMax time.Duration
	// Observe, if set, counts outcomes: (event type, "malformed" or "error").
	Observe func(eventType, outcome string)
}

// DefaultConsumerConfig returns a ConsumerConfig with every field but URL
// and Queue at its default. The exchange and the connection (dial timeout,
// heartbeat, first reconnect pause) default as the sender's do, in
// DefaultConfig. ReconnectMax is longer: the sender's is short because the
// relay backs off on its own, and nothing does for a consumer.
func DefaultConsumerConfig() ConsumerConfig {
	conn := DefaultConfig()
	return ConsumerConfig{
		Exchange:      conn.Exchange,
		DialTimeout:   conn.DialTimeout,
		Heartbeat:     conn.Heartbeat,
		ReconnectBase: conn.ReconnectBase,
		Prefetch:      2 * inbox.MaxBatch,
		ProbeInterval: time.Second,
		ReconnectMax:  30 * time.Second,
		RetryBase:     consume.DefaultRetryBase,
		RetryMax:      consume.DefaultRetryMax,
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (cfg ConsumerConfig) Validate() error {
	const f = "rabbitmq.ConsumerConfig."
	if err := validateEndpoint(f, cfg.URL, cfg.Exchange); err != nil {
		return err
	}
	if strings.TrimSpace(cfg.Queue) == "" || len(cfg.Queue) > 250 || strings.HasPrefix(cfg.Queue, "amq.") {
		return config.Invalid(f+"Queue", cfg.Queue, "want 1 to 250 characters, not starting with amq.")
	}
	if cfg.Prefetch < 1 || cfg.Prefetch > 10000 {
		return config.Invalid(f+"Prefetch", cfg.Prefetch, "want 1 to 10000")
	}
	return config.CheckDurations(f, append([]config.Duration{
		{Name: "DialTimeout", Value: cfg.DialTimeout, Min: 100 * time.Millisecond, Max: time.Minute},
		{Name: "Heartbeat", Value: cfg.Heartbeat, Min: time.Second, Max: time.Minute},
		{Name: "ProbeInterval", Value: cfg.ProbeInterval, Min: 10 * time.Millisecond, Max: time.Minute},
		{Name: "ReconnectBase", Value: cfg.ReconnectBase, Min: time.Millisecond, Max: time.Minute},
		{Name: "ReconnectMax", Value: cfg.ReconnectMax, Min: cfg.ReconnectBase, Max: 10 * time.Minute},
	}, consume.RetryLimits(cfg.RetryBase, cfg.RetryMax)...))
}

// Consumer feeds a worker from a RabbitMQ queue: one durable quorum queue
// per worker group with a single active consumer, so that events reach the
// handler in queue order, one at a time, with several workers running. A
// message is acknowledged only after the handler returned nil (its
// database transaction committed); a malformed one is logged, counted and
// rejected without requeue, which dead-letters it to "<queue>.dead". When
// it becomes the active consumer it has an inbox.Adopter adopt the work of
// other partitions (a Kafka deployment's), then tells a PartitionHandler
// that Partition is assigned, and revoked when it stops being it.
type Consumer struct {
	startstop.BaseStartStop

	cfg     ConsumerConfig
	handler inbox.Handler
	loop    *consume.Loop
	log     *slog.Logger

	mu   sync.Mutex
	conn *amqp.Connection // the current connection, for Ping
}

// NewConsumer checks cfg and returns a consumer that feeds h. It connects on
// Start and keeps trying while the broker is down.
func NewConsumer(cfg ConsumerConfig, h inbox.Handler, logger *slog.Logger) (*Consumer, error) {
	config.FillZero(&cfg, DefaultConsumerConfig())
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid rabbitmq consumer config: %w", err)
	}
	if h == nil {
		return nil, errors.New("invalid rabbitmq consumer config: no handler")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "consumer", "queue", cfg.Queue, "exchange", cfg.Exchange)
	loop := consume.New(consume.Config{Handler: h, RetryBase: cfg.RetryBase, RetryMax: cfg.RetryMax,
		Observe: cfg.Observe, Logger: log,
		Skipped: "malformed message dead-lettered", SkippedAttrs: []any{"dead_letter_queue", DeadQueue(cfg.Queue)}})
	return &Consumer{cfg: cfg, handler: h, loop: loop, log: log}, nil
}

// DeadQueue is the queue that receives q's malformed messages.
func DeadQueue(q string) string { return q + ".dead" }

// Start consumes in one goroutine until Stop or until ctx ends.
func (c *Consumer) Start(ctx context.Context) error { return c.StartLoop(ctx, "consumer", c.run) }

// Stop finishes or abandons the message in hand (unacknowledged, it goes
// back to the queue), revokes the partition from the handler and closes
// the connection, which lets another consumer become the active one. It
// waits for all of that; safe twice and without Start.
func (c *Consumer) Stop() { c.BaseStartStop.Stop() }

// Ping returns nil while the consumer's connection is open.
func (c *Consumer) Ping(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.conn.IsClosed() {
		return fmt.Errorf("rabbitmq consumer not connected to %s", config.RedactURL(c.cfg.URL))
	}
	return nil
}

func (c *Consumer) run(ctx context.Context) {
	c.log.Info("consumer started", "url", config.RedactURL(c.cfg.URL))
	defer c.log.Info("consumer stopped")
	b := &backoff.Backoff{Base: c.cfg.ReconnectBase, Max: c.cfg.ReconnectMax}
	for ctx.Err() == nil {
		err := c.session(ctx, b)
		if ctx.Err() != nil {
			return
		}
		pause := b.Next()
		c.log.Warn(fmt.Sprintf("rabbitmq consumer of queue %s lost or refused its connection; retrying in %s", c.cfg.Queue, pause),
			"retry_in", pause, "failures", b.Failures(), "err", err)
		if !backoff.Sleep(ctx, pause) {
			return
		}
	}
}

// Declare declares what a worker group reads: the exchange, the dead-letter
// queue, and the group's quorum queue (single active consumer, malformed
// messages dead-lettered) bound to the exchange with "#".
func Declare(ch *amqp.Channel, exchange, queue string) error {
	if err := DeclareExchange(ch, exchange); err != nil {
		return err
	}
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare(DeadQueue(queue), true, false, false, false, quorum); err != nil {
		return fmt.Errorf("declare queue %s: %w", DeadQueue(queue), err)
	}
	args := amqp.Table{
		amqp.QueueTypeArg:            amqp.QueueTypeQuorum,
		amqp.SingleActiveConsumerArg: true,
		"x-dead-letter-exchange":     "",
		"x-dead-letter-routing-key":  DeadQueue(queue),
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", queue, exchange, err)
	}
	return nil
}

// DeclareQueue connects to url, declares what the worker group queue
// reads (Declare: the exchange, the queue with the worker's arguments, its
// binding), and disconnects. serve calls it at start, so that events sent
// before the first worker of the group ever ran wait in the queue instead
// of coming back unroutable (312 NO_ROUTE, a rejection that spends an
// attempt, FAIL after the last). Declaring again with the same arguments
// changes nothing, so serve and the workers may do it in any order.
func DeclareQueue(ctx context.Context, url, exchange, queue string, dialTimeout time.Duration) error {
	if d, ok := ctx.Deadline(); ok {
		dialTimeout = min(dialTimeout, time.Until(d))
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
	if err != nil {
		return fmt.Errorf("connect to declare queue %s: %w", queue, err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel to declare queue %s: %w", queue, err)
	}
	defer func() { _ = ch.Close() }()
	return Declare(ch, exchange, queue)
}

// session connects, declares, consumes until the connection or ctx ends,
// and returns why it ended.
func (c *Consumer) session(ctx context.Context, b *backoff.Backoff) error {
	conn, err := dial(c.cfg.URL, c.cfg.DialTimeout, c.cfg.Heartbeat)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := Declare(ch, c.cfg.Exchange, c.cfg.Queue); err != nil {
		return err
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return err
	}
	// Confirmed, for the probe that closes the session (flushAcks).
	if err := ch.Confirm(false); err != nil {
		return err
	}
	// The work of a session lasts as long as its connection: once that is
	// lost the broker hands the unacknowledged messages, and the queue, to
	// another consumer, so the batch in hand (an event retried while the
	// database is down) is abandoned at once, and the partition revoked,
	// instead of overlapping the next active consumer.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Never cancelled, only closed with the connection: RabbitMQ makes the
	// next waiting consumer active at a cancel, with the messages after the
	// ones this one holds unacknowledged, and returns those behind them at
	// the close; a close returns them first.
	deliveries, err := ch.Consume(c.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	// The library hands deliveries over one at a time: a buffer the size
	// of the prefetch lets the messages that arrived together be taken
	// together, as one batch.
	buffered := make(chan amqp.Delivery, c.cfg.Prefetch)
	sessionDone := make(chan struct{})
	defer close(sessionDone)
	go func() {
		defer close(buffered)
		defer cancel(errChannelClosed)
		for d := range deliveries {
			select {
			case buffered <- d:
			case <-sessionDone:
				return
			}
		}
	}()
	b.Reset() // the broker answered
	c.mu.Lock()
	c.conn = conn
	c.mu.Unlock()
	c.log.Info("consumer connected, waiting to be the active consumer")

	active := false
	defer func() {
		if active {
			c.flushAcks(ch)
			// Let go before the connection closes, so that the next
			// active consumer never overlaps this one's timers.
			if ph, ok := c.handler.(inbox.PartitionHandler); ok {
				ph.Revoked(c.cfg.Queue, []int32{Partition})
			}
			c.log.Info("no longer the active consumer")
		}
	}()
	probe := time.NewTicker(c.cfg.ProbeInterval)
	defer probe.Stop()
	c.sendProbe(ctx, ch)
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-probe.C:
			if !active {
				c.sendProbe(ctx, ch)
			}
		case d, ok := <-buffered:
			if !ok {
				return errChannelClosed
			}
			if !active {
				active = true
				c.log.Info("became the active consumer", "partition", Partition)
				if a, ok := c.handler.(inbox.Adopter); ok {
					n, err := a.Adopt(ctx, Partition)
					if err != nil {
						return fmt.Errorf("adopt: %w", err)
					}
					if n > 0 {
						c.log.Info("adopted pending work of other partitions", "partition", Partition, "adopted", n)
					}
				}
				if ph, ok := c.handler.(inbox.PartitionHandler); ok {
					if err := ph.Assigned(ctx, c.cfg.Queue, []int32{Partition}); err != nil {
						return fmt.Errorf("assign: %w", err)
					}
				}
			}
			batch, err := dropProbes(consume.Collect(d, buffered))
			if err != nil {
				return err
			}
			if len(batch) == 0 {
				continue
			}
			msgs := make([]consume.Message, len(batch))
			for i, d := range batch {
				msgs[i] = c.message(d)
			}
			settled, err := c.loop.Handle(ctx, msgs, acker(batch))
			if err != nil {
				return err
			}
			if !settled {
				return context.Cause(ctx) // unacknowledged: the broker requeues them
			}
		}
	}
}

// errChannelClosed ends a session whose channel (or connection) closed.
var errChannelClosed = errors.New("rabbitmq channel closed")

// dropProbes acknowledges the probes among ds (see probeType) and returns
// the other deliveries, in order.
func dropProbes(ds []amqp.Delivery) ([]amqp.Delivery, error) {
	kept := ds[:0]
	for _, d := range ds {
		if d.Type != probeType {
			kept = append(kept, d)
			continue
		}
		if err := d.Ack(false); err != nil {
			return nil, err
		}
	}
	return kept, nil
}

// sendProbe puts a probe on the queue (see probeType). A failure shows up
// as the channel closing.
func (c *Consumer) sendProbe(ctx context.Context, ch *amqp.Channel) {
	err := ch.PublishWithContext(ctx, "", c.cfg.Queue, false, false, amqp.Publishing{Type: probeType, DeliveryMode: amqp.Transient})
	if err != nil {
		c.log.Debug("active consumer probe not sent", "err", err)
	}
}

// flushAcks waits until the broker applied the acknowledgements sent on
// ch, so that closing the connection returns only what this consumer did
// not handle. An acknowledgement has no reply, and a quorum queue's channel
// holds back the ones past 32 in flight until the queue applied earlier
// commands, and drops them if the channel closes first (RabbitMQ's
// rabbit_fifo_client stashes those settles and never flushes the stash at a
// close): under load the next consumer got events this one had handled.
// A probe published on ch goes to the queue after the settles sent before
// it, and its confirm comes once the queue applied it, when the channel
// has also sent the ones it held back, ahead of its close. The probe waits
// in the queue for the next consumer, which drops it. Bounded by
// DialTimeout.
func (c *Consumer) flushAcks(ch *amqp.Channel) {
	if ch.IsClosed() {
		return // the broker requeues what it held anyway
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout)
	defer cancel()
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", c.cfg.Queue, false, false,
		amqp.Publishing{Type: probeType, DeliveryMode: amqp.Transient})
	if err == nil {
		_, err = confirm.WaitContext(ctx)
	}
	if err != nil {
		c.log.Warn("acknowledgements maybe not applied before the close; the next consumer may get some again", "err", err)
	}
}

// message is d as the consume loop reads it: the queue is the topic, the
// delivery tag the offset.
func (c *Consumer) message(d amqp.Delivery) consume.Message {
	headers := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			headers[k] = s
		}
	}
	return consume.Message{Key: []byte(d.RoutingKey), Headers: headers, Value: d.Body,
		Topic: c.cfg.Queue, Partition: Partition, Offset: int64(d.DeliveryTag),
		Where: []any{"delivery_tag", d.DeliveryTag, "redelivered", d.Redelivered, "routing_key", d.RoutingKey}}
}

// acker settles a batch of deliveries: a multiple ack after the handler
// committed, a reject without requeue (dead-lettering) for a malformed one.
type acker []amqp.Delivery

func (a acker) Ack(i int) error  { return a[i].Ack(true) }
func (a acker) Skip(i int) error { return a[i].Nack(false, false) }
