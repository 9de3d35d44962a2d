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

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/inbox/consume"
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
	// pause between metadata retries. Default 100ms; 1ms to 1m (the limits
	// of consume.RetryLimits, as for every broker's consumer).
	RetryBase time.Duration
	// RetryMax caps those pauses. Default 5s; RetryBase to 10m.
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
		RetryBase:      consume.DefaultRetryBase,
		RetryMax:       consume.DefaultRetryMax,
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
	}
	if err := config.CheckDurations(f, consume.RetryLimits(cfg.RetryBase, cfg.RetryMax)); err != nil {
		return err
	}
	switch {
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
	// The relay's producer commits each send as a transaction; a send
	// that got no answer is never committed, and its late copy is skipped
	// here instead of arriving after a later event of its post.
	c.Consumer.IsolationLevel = sarama.ReadCommitted
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
	loop    *consume.Loop
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
	log := logger.With("component", "consumer", "group", cfg.GroupID, "topic", cfg.Topic)
	loop := consume.New(consume.Config{Handler: h, RetryBase: cfg.RetryBase, RetryMax: cfg.RetryMax,
		Observe: cfg.Observe, Logger: log})
	return &Consumer{cfg: cfg, sconf: cfg.saramaConfig(), handler: h, loop: loop, log: log}, nil
}

// Config returns the consumer's configuration with defaults filled in.
func (c *Consumer) Config() ConsumerConfig { return c.cfg }

// Start joins the group and consumes in one goroutine until Stop or until
// ctx ends.
func (c *Consumer) Start(ctx context.Context) error { return c.StartLoop(ctx, "consumer", c.run) }

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
// loop together (one transaction with an inbox.BatchHandler), and each is
// marked only once it and those before it are handled or skipped.
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
			batch := consume.Collect(msg, claim.Messages())
			msgs := make([]consume.Message, len(batch))
			for i, m := range batch {
				msgs[i] = message(m)
			}
			// Marking cannot fail: sarama keeps the offsets until a commit.
			if settled, _ := h.c.loop.Handle(ctx, msgs, marker{sess, batch}); !settled {
				return nil // the session ends; the rest was not marked
			}
		}
	}
}

// message is msg as the consume loop reads it.
func message(msg *sarama.ConsumerMessage) consume.Message {
	headers := make(map[string]string, len(msg.Headers))
	for _, rh := range msg.Headers {
		if rh != nil {
			headers[string(rh.Key)] = string(rh.Value)
		}
	}
	return consume.Message{Key: msg.Key, Headers: headers, Value: msg.Value,
		Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset,
		Where: []any{"partition", msg.Partition, "offset", msg.Offset}}
}

// marker settles a batch by marking offsets for the next commit: a skipped
// message is marked like a handled one, so the partition moves past it.
type marker struct {
	sess  sarama.ConsumerGroupSession
	batch []*sarama.ConsumerMessage
}

func (m marker) Ack(i int) error  { m.sess.MarkMessage(m.batch[i], ""); return nil }
func (m marker) Skip(i int) error { m.sess.MarkMessage(m.batch[i], ""); return nil }
