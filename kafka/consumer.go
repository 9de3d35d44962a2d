package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/internal/backoff"
	"github.com/postingsvc/posting/internal/startstop"
)

// DefaultConsumerGroup is the consumer group of the worker.
const DefaultConsumerGroup = "posting-worker"

// consumerErrorWarnEvery spaces the warnings of sarama's consumer errors.
const consumerErrorWarnEvery = time.Second

// ConsumerConfig configures a Consumer. The zero value of every field but
// Brokers means its default.
type ConsumerConfig struct {
	// Brokers is the bootstrap list, host:port each. Required, at least one.
	Brokers []string
	// Topic is read from. Default event.DefaultTopic.
	Topic string
	// GroupID is the consumer group; its members share the partitions and
	// its committed offsets say where a restart resumes. Default
	// "posting-worker".
	GroupID string
	// ClientID names the connections in broker logs. Default "posting-worker".
	ClientID string
	// KafkaVersion is the protocol version sarama assumes. Default "2.8.0";
	// at least "0.10.2", the first with the group protocol sarama needs.
	KafkaVersion string
	// SessionTimeout is how long the group waits for a silent member before
	// giving its partitions to the others. Default 10s; 6s to 5m (brokers
	// refuse less than their group.min.session.timeout.ms, 6s by default).
	// Heartbeats go every tenth of it, so members hear of a rebalance soon.
	SessionTimeout time.Duration
	// CommitInterval is how often marked offsets are committed; they are
	// also committed when a session ends. Default 1s; 10ms to 1m.
	CommitInterval time.Duration
	// RetryBase is the pause before handling an event again after the
	// handler failed, doubled per failure up to RetryMax; also sarama's
	// pause between metadata retries. Default 100ms.
	RetryBase time.Duration
	// RetryMax caps those pauses. Default 5s; at least RetryBase.
	RetryMax time.Duration
	// RejoinBase is the pause after a failed attempt to reach the cluster
	// or join the group; it doubles with every failure in a row, jittered
	// into its upper half, up to RejoinMax, and starts again from
	// RejoinBase once a session was set up. Without it a worker whose
	// brokers are down tries (and logs) several times a second. Default
	// 250ms; more than 0.
	RejoinBase time.Duration
	// RejoinMax caps the pause between failed joins. Default 30s; at least
	// RejoinBase, at most 10m.
	RejoinMax time.Duration
	// Observe, if set, is told of events the consumer itself settles:
	// "malformed" (skipped) and "error" (the handler failed; tried again).
	// eventType is the header's value, "" when missing.
	Observe func(eventType, outcome string)
}

// DefaultConsumerConfig returns a ConsumerConfig with every field but
// Brokers and Observe at its default: the one place the defaults are
// written. A caller that takes values from elsewhere (a command line) starts
// from it, so that an empty value it was given is refused by Validate rather
// than replaced.
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{
		Topic:          event.DefaultTopic,
		GroupID:        DefaultConsumerGroup,
		ClientID:       DefaultConsumerGroup,
		KafkaVersion:   "2.8.0",
		SessionTimeout: 10 * time.Second,
		CommitInterval: time.Second,
		RetryBase:      100 * time.Millisecond,
		RetryMax:       5 * time.Second,
		RejoinBase:     250 * time.Millisecond,
		RejoinMax:      30 * time.Second,
	}
}

func (cfg ConsumerConfig) withDefaults() ConsumerConfig {
	config.FillZero(&cfg, DefaultConsumerConfig())
	return cfg
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (cfg ConsumerConfig) Validate() error {
	const f = "kafka.ConsumerConfig."
	if err := validateBrokers(f+"Brokers", cfg.Brokers); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(cfg.Topic) == "":
		return config.Invalid(f+"Topic", cfg.Topic, "empty topic")
	case strings.TrimSpace(cfg.GroupID) == "":
		return config.Invalid(f+"GroupID", cfg.GroupID, "empty group id")
	case cfg.SessionTimeout < 6*time.Second || cfg.SessionTimeout > 5*time.Minute:
		return config.Invalid(f+"SessionTimeout", cfg.SessionTimeout, "want 6s to 5m")
	case cfg.CommitInterval < 10*time.Millisecond || cfg.CommitInterval > time.Minute:
		return config.Invalid(f+"CommitInterval", cfg.CommitInterval, "want 10ms to 1m")
	case cfg.RetryBase <= 0:
		return config.Invalid(f+"RetryBase", cfg.RetryBase, "must be positive")
	case cfg.RetryMax < cfg.RetryBase:
		return config.Invalid(f+"RetryMax", cfg.RetryMax, "below the retry base %s", cfg.RetryBase)
	case cfg.RejoinBase <= 0:
		return config.Invalid(f+"RejoinBase", cfg.RejoinBase, "must be positive")
	case cfg.RejoinMax < cfg.RejoinBase || cfg.RejoinMax > 10*time.Minute:
		return config.Invalid(f+"RejoinMax", cfg.RejoinMax, "want the rejoin base %s to 10m", cfg.RejoinBase)
	}
	v, err := sarama.ParseKafkaVersion(cfg.KafkaVersion)
	if err != nil {
		return config.Invalid(f+"KafkaVersion", cfg.KafkaVersion, "%w", err)
	}
	if !v.IsAtLeast(sarama.V0_10_2_0) {
		return config.Invalid(f+"KafkaVersion", cfg.KafkaVersion, "consumer groups need at least 0.10.2")
	}
	return nil
}

// saramaConfig is the one place sarama is configured for consuming.
func (cfg ConsumerConfig) saramaConfig() *sarama.Config {
	v, _ := sarama.ParseKafkaVersion(cfg.KafkaVersion) // checked by Validate
	c := sarama.NewConfig()
	c.ClientID = cfg.ClientID
	c.Version = v
	c.Net.DialTimeout = 3 * time.Second
	c.Metadata.Full = false
	c.Metadata.Retry.Backoff = cfg.RetryBase
	// A new group reads the topic from its start: events written before the
	// first worker joined are not skipped.
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = true
	c.Consumer.Offsets.AutoCommit.Interval = cfg.CommitInterval
	c.Consumer.Group.Session.Timeout = cfg.SessionTimeout
	c.Consumer.Group.Heartbeat.Interval = cfg.SessionTimeout / 10
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	c.Consumer.Return.Errors = true
	return c
}

// Consumer reads the topic as a member of a consumer group and hands every
// event, decoded by inbox.Decode, to a handler, one partition after another
// in offset order. A message's offset is marked for commit only after the
// handler returned nil (its work is durable) or the message was malformed;
// a failing handler gets the same event again after a pause, so a database
// outage delays events and loses none. Commits happen every CommitInterval
// and at the end of every session.
type Consumer struct {
	startstop.BaseStartStop

	cfg     ConsumerConfig
	sconf   *sarama.Config
	handler inbox.Handler
	log     *slog.Logger
}

// NewConsumer checks cfg and returns a consumer that feeds h. It connects on
// Start and keeps trying while the brokers are down.
func NewConsumer(cfg ConsumerConfig, h inbox.Handler, logger *slog.Logger) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid kafka consumer config: %w", err)
	}
	if h == nil {
		return nil, errors.New("invalid kafka consumer config: no handler")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{cfg: cfg, sconf: cfg.saramaConfig(), handler: h,
		log: logger.With("component", "consumer", "group", cfg.GroupID, "topic", cfg.Topic)}, nil
}

// Config returns the consumer's configuration with defaults filled in.
func (c *Consumer) Config() ConsumerConfig { return c.cfg }

// Start joins the group and consumes in one goroutine until Stop or until
// ctx ends.
func (c *Consumer) Start(ctx context.Context) error {
	ctx, done, err := c.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	go func() {
		defer done()
		c.run(ctx)
	}()
	return nil
}

// Stop ends the session in progress: the event being handled is finished or
// abandoned (a handler that honours its context stops), marked offsets are
// committed, the partitions are revoked from the handler, and the member
// leaves the group. It waits for all of that; it is safe to call twice and
// without Start.
func (c *Consumer) Stop() { c.BaseStartStop.Stop() }

// run keeps a group member alive: connect, consume sessions one after
// another (a rebalance ends a session), reconnect after failures. Failed
// joins in a row wait longer and longer (see ConsumerConfig.RejoinBase),
// across new clients too: building a client does not reach the cluster, so
// it says nothing about whether the brokers are back.
func (c *Consumer) run(ctx context.Context) {
	c.log.Info("consumer started", "brokers", strings.Join(c.cfg.Brokers, ","))
	defer c.log.Info("consumer stopped")
	// Failed joins in a row: jittered, so that the workers of a group cut
	// off together do not come back together.
	b := &backoff.Backoff{Base: c.cfg.RejoinBase, Max: c.cfg.RejoinMax}
	for ctx.Err() == nil {
		group, err := sarama.NewConsumerGroup(c.cfg.Brokers, c.cfg.GroupID, c.sconf)
		if err != nil {
			if !c.waitRejoin(ctx, b, err) {
				return
			}
			continue
		}
		c.consume(ctx, group, b)
		if err := group.Close(); err != nil {
			c.log.Debug("consumer group closed", "err", err)
		}
	}
}

// consume runs sessions on group until ctx ends or the group breaks.
func (c *Consumer) consume(ctx context.Context, group sarama.ConsumerGroup, b *backoff.Backoff) {
	go func() { // ends when the group is closed
		// A broker that goes away mid-session makes every partition's
		// consumer report every retry: one warning a second is enough to
		// see it, the rest go to debug, counted in the next warning.
		var warned time.Time
		suppressed := 0
		for err := range group.Errors() {
			if time.Since(warned) < consumerErrorWarnEvery {
				suppressed++
				c.log.Debug("consumer error", "err", err)
				continue
			}
			c.log.Warn("consumer error", "err", err, "suppressed", suppressed)
			warned, suppressed = time.Now(), 0
		}
	}()
	h := &groupHandler{c: c}
	for ctx.Err() == nil {
		joined := h.sessions.Load()
		err := group.Consume(ctx, []string{c.cfg.Topic}, h)
		if h.sessions.Load() != joined {
			b.Reset() // a session was set up: the cluster answered
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, sarama.ErrClosedConsumerGroup):
			return
		case err != nil:
			if !c.waitRejoin(ctx, b, err) {
				return
			}
			if errors.Is(err, sarama.ErrOutOfBrokers) {
				return // a new client, with fresh metadata
			}
		default:
			// A rebalance: join again at once.
		}
	}
}

// waitRejoin logs a failed join, with what the consumer waits for and how
// long, and waits; it reports false when ctx ended first.
func (c *Consumer) waitRejoin(ctx context.Context, b *backoff.Backoff, err error) bool {
	pause := b.Next()
	brokers := strings.Join(c.cfg.Brokers, ",")
	c.log.Warn(fmt.Sprintf("cannot join consumer group %s on kafka brokers %s; retrying in %s", c.cfg.GroupID, brokers, pause),
		"brokers", brokers, "retry_in", pause, "failures", b.Failures(), "err", err)
	return backoff.Sleep(ctx, pause)
}

// groupHandler adapts the handler to sarama's session callbacks.
type groupHandler struct {
	c *Consumer
	// sessions counts the sessions set up (joined and assigned), which
	// tells consume that the cluster answered.
	sessions atomic.Int64
}

func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	parts := sess.Claims()[h.c.cfg.Topic]
	h.c.log.Info("partitions assigned", "partitions", parts, "generation", sess.GenerationID())
	if ph, ok := h.c.handler.(inbox.PartitionHandler); ok && len(parts) > 0 {
		if err := ph.Assigned(sess.Context(), h.c.cfg.Topic, parts); err != nil {
			return fmt.Errorf("assign partitions %v: %w", parts, err)
		}
	}
	h.sessions.Add(1)
	return nil
}

func (h *groupHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	parts := sess.Claims()[h.c.cfg.Topic]
	// Let go first, so that no work of this member overlaps the next
	// owner's; then commit what was marked.
	if ph, ok := h.c.handler.(inbox.PartitionHandler); ok && len(parts) > 0 {
		ph.Revoked(h.c.cfg.Topic, parts)
	}
	sess.Commit()
	h.c.log.Info("partitions revoked", "partitions", parts)
	return nil
}

// ConsumeClaim handles one partition's messages in order: the messages
// fetched and waiting when one arrives, up to inbox.MaxBatch, go to the
// handler together (one transaction with an inbox.BatchHandler), and the
// last of them is marked only once they are all handled.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	ctx := sess.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			batch := append(make([]*sarama.ConsumerMessage, 0, 16), msg)
		more:
			for len(batch) < inbox.MaxBatch {
				select {
				case m, ok := <-claim.Messages():
					if !ok {
						break more // the next receive ends the loop
					}
					batch = append(batch, m)
				default:
					break more
				}
			}
			if !h.handleBatch(ctx, batch) {
				return nil // the session ends; the batch was not marked
			}
			sess.MarkMessage(batch[len(batch)-1], "")
		}
	}
}

// handleBatch settles msgs (handled, or skipped as malformed), in one call
// of an inbox.BatchHandler when the handler is one; when that call fails,
// the messages are handled one at a time, which retries each until it is
// settled. It returns false when ctx ended first.
func (h *groupHandler) handleBatch(ctx context.Context, msgs []*sarama.ConsumerMessage) bool {
	bh, ok := h.c.handler.(inbox.BatchHandler)
	if !ok || len(msgs) == 1 {
		return h.handleEach(ctx, msgs)
	}
	evs := make([]inbox.Event, 0, len(msgs))
	decoded := make([]decodedMessage, 0, len(msgs))
	for _, msg := range msgs {
		d := decode(msg)
		if d.err != nil {
			h.c.skip(d.headers, d.where, d.err)
			continue
		}
		evs, decoded = append(evs, d.ev), append(decoded, d)
	}
	if len(evs) == 0 {
		return true
	}
	malformed, err := bh.HandleBatch(ctx, evs)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		h.c.log.Warn("batch handling failed; handling its events one at a time", "partition", msgs[0].Partition,
			"first_offset", msgs[0].Offset, "last_offset", msgs[len(msgs)-1].Offset, "err", err)
		return h.handleEach(ctx, msgs)
	}
	for i, merr := range malformed {
		if merr != nil {
			h.c.skip(decoded[i].headers, decoded[i].where, merr)
		}
	}
	return true
}

// handleEach settles msgs one at a time, in order.
func (h *groupHandler) handleEach(ctx context.Context, msgs []*sarama.ConsumerMessage) bool {
	for _, msg := range msgs {
		if !h.handle(ctx, msg) {
			return false
		}
	}
	return true
}

// decodedMessage is a message decoded for the handler: its event (when err
// is nil), its headers and its coordinates for logs.
type decodedMessage struct {
	ev      inbox.Event
	headers map[string]string
	where   []any
	err     error
}

func decode(msg *sarama.ConsumerMessage) decodedMessage {
	headers := make(map[string]string, len(msg.Headers))
	for _, rh := range msg.Headers {
		if rh != nil {
			headers[string(rh.Key)] = string(rh.Value)
		}
	}
	where := []any{"partition", msg.Partition, "offset", msg.Offset}
	ev, err := inbox.Decode(msg.Key, headers, msg.Value)
	if err == nil {
		ev.Topic, ev.Partition, ev.Offset = msg.Topic, msg.Partition, msg.Offset
		where = append(where, "event_id", ev.EventID, "event_type", ev.Type, "post_id", ev.PostID)
	}
	return decodedMessage{ev: ev, headers: headers, where: where, err: err}
}

// handle decodes msg and hands it to the handler until it is settled:
// handled, or skipped as malformed. It returns false when ctx ended first.
func (h *groupHandler) handle(ctx context.Context, msg *sarama.ConsumerMessage) bool {
	c := h.c
	d := decode(msg)
	headers, where, ev := d.headers, d.where, d.ev
	if d.err != nil {
		c.skip(headers, where, d.err)
		return true
	}
	// One event's own retries, not jittered: the partition waits on them.
	retry := backoff.Backoff{Base: c.cfg.RetryBase, Max: c.cfg.RetryMax, Exact: true}
	for {
		err := c.handler.Handle(ctx, ev)
		switch {
		case err == nil:
			return true
		case errors.Is(err, inbox.ErrMalformed):
			c.skip(headers, where, err)
			return true
		case ctx.Err() != nil:
			return false
		}
		c.observe(string(ev.Type), "error")
		pause := retry.Next()
		c.log.Warn("event handling failed; trying again", append(where, "err", err, "pause", pause)...)
		if !backoff.Sleep(ctx, pause) {
			return false
		}
	}
}

// skip logs a malformed message with its coordinates and counts it; the
// caller marks it, so the partition moves on.
func (c *Consumer) skip(headers map[string]string, where []any, err error) {
	c.observe(headers[event.HeaderEventType], "malformed")
	c.log.Error("malformed message skipped", append(where, "err", err)...)
}

func (c *Consumer) observe(eventType, outcome string) {
	if c.cfg.Observe != nil {
		c.cfg.Observe(eventType, outcome)
	}
}
