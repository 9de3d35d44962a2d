package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/backoff"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
)

// ErrProducerTopicMissing is returned by CheckTopic when the topic does not
// exist and the cluster did not create it.
var ErrProducerTopicMissing = errors.New("kafka topic does not exist")

// errProducerClosed is what Publish reports after Close. It wraps
// relay.ErrUnavailable: a closed producer says nothing about the message.
var errProducerClosed = fmt.Errorf("%w: kafka producer closed", relay.ErrUnavailable)

// ProducerConfig configures a Producer. The zero value of every field but
// Brokers means its default.
//
// Timing: Publish returns within SendTimeout of being called, whatever the
// network does, because it enforces that bound itself (see Producer.Publish);
// the relay's stale limit (relay.Config.StaleAfter) must exceed it. sarama's
// own timeouts sit below it so that on an ordinary outage (connection
// refused, a leader election) sarama answers first, with a precise error: one
// attempt of a batch costs at most DialTimeout + 2*RequestTimeout (write the
// request, read the ack, which the leader sends within AckTimeout), after a
// metadata refresh bounded by DialTimeout+RequestTimeout, and a batch gets
// 1+Retries attempts RetryBackoff apart. Only a network that swallows packets
// makes sarama take longer, up to (1+Retries)*(2*DialTimeout+3*RequestTimeout)
// + Retries*RetryBackoff (about 2.5 minutes with the defaults); Publish has
// returned unavailable at SendTimeout by then, and later calls report
// unavailable until that send is over, so two batches are never in flight.
type ProducerConfig struct {
	// Brokers is the bootstrap list, host:port each. Required, at least one.
	Brokers []string
	// Topic receives every event. Default event.DefaultTopic.
	Topic string
	// ClientID names the connections in broker logs and quotas. Default
	// "posting".
	ClientID string
	// SendTimeout bounds one Publish, from the call until every message has
	// an outcome, including waiting for an earlier Publish and connecting.
	// Default 30s; 1s to 10m, and at least DialTimeout + RequestTimeout so
	// that one attempt fits.
	SendTimeout time.Duration
	// DialTimeout bounds opening one broker connection (sarama
	// Net.DialTimeout). Default 3s; 100ms to 1m.
	DialTimeout time.Duration
	// RequestTimeout bounds writing one request and reading its response
	// (sarama Net.WriteTimeout and Net.ReadTimeout). Default 10s; 100ms to
	// 5m, and more than AckTimeout, or acks would time out on the client
	// before the broker gives up.
	RequestTimeout time.Duration
	// AckTimeout is how long a partition leader waits for the in-sync
	// replicas before answering REQUEST_TIMED_OUT (sarama Producer.Timeout).
	// Default 5s; 10ms to 5m.
	AckTimeout time.Duration
	// Retries is how many times sarama resends a batch after a retriable
	// error before the message fails (sarama Producer.Retry.Max). Default 3;
	// 1 to 10 (the idempotent producer needs at least 1).
	Retries int
	// RetryBackoff is the pause before each resend. Default 100ms; 1ms to 10s.
	RetryBackoff time.Duration
	// MaxMessageBytes is the largest message sarama sends; a larger one fails
	// without being sent (sarama Producer.MaxMessageBytes). Default 1000000;
	// 1 KiB to 64 MiB, and at most the broker's message.max.bytes.
	MaxMessageBytes int
	// KafkaVersion is the protocol version sarama assumes, negotiated down per
	// broker. Default "2.8.0"; at least "0.11.0", the first with idempotent
	// producers.
	KafkaVersion string
	// ProbeTimeout bounds Ping and CheckTopic. Default 2s; 100ms to 1m.
	ProbeTimeout time.Duration
}

// DefaultProducerConfig returns a ProducerConfig with every field but
// Brokers at its default: the one place the defaults are written. A caller
// that takes values from elsewhere (a command line) starts from it, so that
// an empty value it was given is refused by Validate rather than replaced.
func DefaultProducerConfig() ProducerConfig {
	return ProducerConfig{
		Topic:           event.DefaultTopic,
		ClientID:        "posting",
		SendTimeout:     30 * time.Second,
		DialTimeout:     3 * time.Second,
		RequestTimeout:  10 * time.Second,
		AckTimeout:      5 * time.Second,
		Retries:         3,
		RetryBackoff:    100 * time.Millisecond,
		MaxMessageBytes: 1000000,
		KafkaVersion:    "2.8.0",
		ProbeTimeout:    2 * time.Second,
	}
}

// withDefaults returns cfg with every unset field at its default.
func (cfg ProducerConfig) withDefaults() ProducerConfig {
	config.FillZero(&cfg, DefaultProducerConfig())
	return cfg
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (cfg ProducerConfig) Validate() error {
	const f = "kafka.ProducerConfig."
	if err := validateBrokers(f+"Brokers", cfg.Brokers); err != nil {
		return err
	}
	if strings.TrimSpace(cfg.Topic) == "" {
		return config.Invalid(f+"Topic", cfg.Topic, "empty topic")
	}
	durations := []struct {
		name     string
		v        time.Duration
		min, max time.Duration
	}{
		{"SendTimeout", cfg.SendTimeout, time.Second, 10 * time.Minute},
		{"DialTimeout", cfg.DialTimeout, 100 * time.Millisecond, time.Minute},
		{"RequestTimeout", cfg.RequestTimeout, 100 * time.Millisecond, 5 * time.Minute},
		{"AckTimeout", cfg.AckTimeout, 10 * time.Millisecond, 5 * time.Minute},
		{"RetryBackoff", cfg.RetryBackoff, time.Millisecond, 10 * time.Second},
		{"ProbeTimeout", cfg.ProbeTimeout, 100 * time.Millisecond, time.Minute},
	}
	for _, d := range durations {
		if d.v < d.min || d.v > d.max {
			return config.Invalid(f+d.name, d.v, "want %s to %s", d.min, d.max)
		}
	}
	if cfg.RequestTimeout <= cfg.AckTimeout {
		return config.Invalid(f+"RequestTimeout", cfg.RequestTimeout, "must exceed the ack timeout %s", cfg.AckTimeout)
	}
	if cfg.SendTimeout < cfg.DialTimeout+cfg.RequestTimeout {
		return config.Invalid(f+"SendTimeout", cfg.SendTimeout, "must be at least dial timeout + request timeout (%s)", cfg.DialTimeout+cfg.RequestTimeout)
	}
	if cfg.Retries < 1 || cfg.Retries > 10 {
		return config.Invalid(f+"Retries", cfg.Retries, "want 1 to 10")
	}
	if cfg.MaxMessageBytes < 1024 || cfg.MaxMessageBytes > 64<<20 {
		return config.Invalid(f+"MaxMessageBytes", cfg.MaxMessageBytes, "want 1024 to %d", 64<<20)
	}
	v, err := sarama.ParseKafkaVersion(cfg.KafkaVersion)
	if err != nil {
		return config.Invalid(f+"KafkaVersion", cfg.KafkaVersion, "%w", err)
	}
	if !v.IsAtLeast(sarama.V0_11_0_0) {
		return config.Invalid(f+"KafkaVersion", cfg.KafkaVersion, "idempotent producers need at least 0.11.0")
	}
	return nil
}

// validateBrokers checks a bootstrap list, the field named field: at least
// one host:port.
func validateBrokers(field string, brokers []string) error {
	if len(brokers) == 0 {
		return config.Invalid(field, brokers, "no brokers")
	}
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return config.Invalid(field, b, "want host:port: %w", err)
		}
	}
	return nil
}

// saramaConfig is the one place sarama is configured for sending.
func (cfg ProducerConfig) saramaConfig() (*sarama.Config, error) {
	version, err := sarama.ParseKafkaVersion(cfg.KafkaVersion)
	if err != nil {
		return nil, err
	}
	c := sarama.NewConfig()
	c.ClientID = cfg.ClientID
	c.Version = version
	c.Net.DialTimeout = cfg.DialTimeout
	c.Net.ReadTimeout = cfg.RequestTimeout
	c.Net.WriteTimeout = cfg.RequestTimeout
	// One request in flight per broker: with the idempotent producer this
	// keeps a partition's batches, and their retries, in order.
	c.Net.MaxOpenRequests = 1
	c.Metadata.Full = false // only the topic we send to
	c.Metadata.Retry.Max = 1
	c.Metadata.Retry.Backoff = cfg.RetryBackoff
	c.Metadata.Timeout = cfg.DialTimeout + cfg.RequestTimeout
	// The cluster decides: with auto.create.topics.enable it creates the
	// topic, otherwise sends fail as unavailable and CheckTopic says why.
	c.Metadata.AllowAutoTopicCreation = true
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Timeout = cfg.AckTimeout
	c.Producer.Retry.Max = cfg.Retries
	c.Producer.Retry.Backoff = cfg.RetryBackoff
	c.Producer.Transaction.Retry.Max = cfg.Retries // InitProducerID at connect
	c.Producer.Transaction.Retry.Backoff = cfg.RetryBackoff
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.MaxMessageBytes = cfg.MaxMessageBytes
	// sarama's hash partitioner: FNV-1a of the key, the same post always
	// lands on the same partition.
	c.Producer.Partitioner = sarama.NewHashPartitioner
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// probeConfig is saramaConfig with every network timeout at ProbeTimeout,
// for the one-request connections of Ping and CheckTopic.
func (cfg ProducerConfig) probeConfig() (*sarama.Config, error) {
	c, err := cfg.saramaConfig()
	if err != nil {
		return nil, err
	}
	c.Net.DialTimeout = cfg.ProbeTimeout
	c.Net.ReadTimeout = cfg.ProbeTimeout
	c.Net.WriteTimeout = cfg.ProbeTimeout
	return c, nil
}

// Producer sends outbox rows to Kafka for the relay. It implements
// relay.Publisher. It connects lazily, so it can be built while the cluster
// is down, and it replaces its sarama producer after any failed send.
type Producer struct {
	cfg    ProducerConfig
	sconf  *sarama.Config
	pconf  *sarama.Config
	logger *slog.Logger

	// turn holds one token while a send runs. The send itself gives it back
	// when sarama is done, even after Publish gave up waiting, so two
	// batches are never in flight at once: a late batch cannot overtake a
	// resend of itself or a later event of its key.
	turn chan struct{}

	mu        sync.Mutex
	sp        sarama.SyncProducer // nil until connected, or after a failure
	closed    bool
	connected bool // logged the first connection
}

// NewProducer checks cfg and returns a producer that connects on its first
// Publish: it does not fail when the brokers are down.
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
	return &Producer{cfg: cfg, sconf: sconf, pconf: pconf, logger: logger, turn: make(chan struct{}, 1)}, nil
}

// Config returns the producer's configuration with defaults filled in.
func (p *Producer) Config() ProducerConfig { return p.cfg }

// Publish sends msgs to the topic, keyed by post id, and waits until every
// message is acknowledged by all in-sync replicas or has failed. It returns
// one error per message, in order: nil when acknowledged; an error wrapping
// relay.ErrUnavailable when the cluster could not be reached or answered
// with a retriable error; a *ProducerRejectedError when the broker (or sarama,
// before sending) refused that message.
//
// Publish returns within SendTimeout, or sooner when ctx ends. When that
// bound passes first, every message is reported unavailable: some may have
// been written, which the relay's resend and the consumer's event-id dedup
// absorb. Calls are serialized; each one waits for the previous send.
func (p *Producer) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	timer := time.NewTimer(p.cfg.SendTimeout)
	defer timer.Stop()
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return producerFill(errs, fmt.Errorf("%w: %w", relay.ErrUnavailable, ctx.Err()))
	case <-timer.C:
		return producerFill(errs, fmt.Errorf("%w: an earlier send still runs after %s", relay.ErrUnavailable, p.cfg.SendTimeout))
	}

	pms := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		pms[i] = &sarama.ProducerMessage{
			Topic: p.cfg.Topic,
			Key:   sarama.StringEncoder(m.Key()),
			Value: sarama.StringEncoder(m.Payload),
			Headers: []sarama.RecordHeader{
				{Key: []byte(event.HeaderEventID), Value: []byte(m.EventID)},
				{Key: []byte(event.HeaderEventType), Value: []byte(m.EventType)},
			},
			Metadata: i, // SendMessages reports failures by message, not index
		}
	}
	var abandoned atomic.Bool
	done := make(chan []error, 1)
	go func() {
		defer func() { <-p.turn }()
		done <- p.send(pms, &abandoned)
	}()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		abandoned.Store(true)
		return producerFill(errs, fmt.Errorf("%w: %w", relay.ErrUnavailable, ctx.Err()))
	case <-timer.C:
		abandoned.Store(true)
		return producerFill(errs, fmt.Errorf("%w: no answer within the send timeout %s", relay.ErrUnavailable, p.cfg.SendTimeout))
	}
}

// send runs one batch through the sarama producer, connecting first if
// needed. It holds the turn.
func (p *Producer) send(pms []*sarama.ProducerMessage, abandoned *atomic.Bool) []error {
	errs := make([]error, len(pms))
	sp, err := p.connect()
	if err != nil {
		return producerFill(errs, err)
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
		producerFill(errs, producerClassify(err))
	}
	if err != nil || abandoned.Load() || p.isClosed() {
		// After a failure sarama has bumped its idempotent epoch or holds
		// connections that just broke; a fresh producer (new producer id,
		// fresh metadata) is cheap and starts from a known state. A Close
		// that gave up waiting for this send leaves the closing to us.
		p.disconnect(sp, err)
	}
	return errs
}

// connect returns the current sarama producer or builds one. Failing to build
// one means the cluster could not be reached.
func (p *Producer) connect() (sarama.SyncProducer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errProducerClosed
	}
	if p.sp != nil {
		return p.sp, nil
	}
	sp, err := sarama.NewSyncProducer(p.cfg.Brokers, p.sconf)
	if err != nil {
		return nil, fmt.Errorf("%w: connect to %s: %w", relay.ErrUnavailable, strings.Join(p.cfg.Brokers, ","), err)
	}
	p.sp = sp
	if !p.connected {
		p.connected = true
		p.logger.Info("kafka producer connected", "brokers", strings.Join(p.cfg.Brokers, ","), "topic", p.cfg.Topic, "client_id", p.cfg.ClientID)
	}
	return sp, nil
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
		p.sp = nil
	}
	p.mu.Unlock()
	if err := sp.Close(); err != nil {
		p.logger.Debug("kafka producer closed after a failed send", "cause", cause, "close_error", err)
	}
}

// Close waits up to SendTimeout for a running send, then closes the
// connections. Later Publish calls report every message unavailable. It is
// safe to call more than once.
func (p *Producer) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	timer := time.NewTimer(p.cfg.SendTimeout)
	defer timer.Stop()
	select {
	case p.turn <- struct{}{}:
		defer func() { <-p.turn }()
	case <-timer.C:
		// Closing under a running SendMessages would race it; the send
		// closes the producer itself when sarama returns.
		return fmt.Errorf("close kafka producer: a send still runs after %s", p.cfg.SendTimeout)
	}
	p.mu.Lock()
	sp := p.sp
	p.sp = nil
	p.mu.Unlock()
	if sp == nil {
		return nil
	}
	if err := sp.Close(); err != nil {
		return fmt.Errorf("close kafka producer: %w", err)
	}
	return nil
}

// SendBound is the longest one Publish takes (SendTimeout): the relay
// refuses a stale limit that a healthy slow send could outlast.
func (p *Producer) SendBound() time.Duration { return p.cfg.SendTimeout }

// Ping reports whether a broker answers a metadata request within
// ProbeTimeout (or ctx), for readiness checks. It does not use or disturb the
// sending connections. A failure wraps relay.ErrUnavailable.
func (p *Producer) Ping(ctx context.Context) error {
	_, err := p.probe(ctx, false)
	return err
}

// CheckTopic reports whether the topic exists. It asks with auto-creation
// allowed, so a cluster with auto.create.topics.enable creates it here; we
// never create it ourselves. A missing topic is an error wrapping
// ErrProducerTopicMissing that names it.
func (p *Producer) CheckTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	for {
		md, err := p.probe(ctx, true)
		if err != nil {
			return err
		}
		var tm *sarama.TopicMetadata
		for _, t := range md.Topics {
			if t.Name == p.cfg.Topic {
				tm = t
			}
		}
		switch {
		case tm == nil || errors.Is(tm.Err, sarama.ErrUnknownTopicOrPartition) || errors.Is(tm.Err, sarama.ErrInvalidTopic):
			return fmt.Errorf("%w: %q on %s: create it, or enable auto.create.topics.enable on the cluster", ErrProducerTopicMissing, p.cfg.Topic, strings.Join(p.cfg.Brokers, ","))
		case errors.Is(tm.Err, sarama.ErrLeaderNotAvailable):
			// The cluster is creating it: ask again shortly.
		case tm.Err != sarama.ErrNoError:
			return fmt.Errorf("kafka topic %q: %s (%d): %w", p.cfg.Topic, producerCodeName(int16(tm.Err)), int16(tm.Err), tm.Err)
		case len(tm.Partitions) > 0:
			return nil
		}
		if !backoff.Sleep(ctx, p.cfg.RetryBackoff) {
			return fmt.Errorf("%w: kafka topic %q has no leader yet: %w", relay.ErrUnavailable, p.cfg.Topic, ctx.Err())
		}
	}
}

// probe sends one metadata request for the topic to the first broker that
// answers, on a connection of its own.
func (p *Producer) probe(ctx context.Context, autoCreate bool) (*sarama.MetadataResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	type result struct {
		md  *sarama.MetadataResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		var errs []error
		for _, addr := range p.cfg.Brokers {
			md, err := producerProbeBroker(addr, p.pconf, p.cfg.Topic, autoCreate)
			if err == nil {
				done <- result{md: md}
				return
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
		done <- result{err: errors.Join(errs...)}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%w: no kafka broker answered: %w", relay.ErrUnavailable, r.err)
		}
		return r.md, nil
	case <-ctx.Done():
		// The probe goroutine ends on its own within its network timeouts.
		return nil, fmt.Errorf("%w: no kafka broker answered: %w", relay.ErrUnavailable, ctx.Err())
	}
}

func producerProbeBroker(addr string, conf *sarama.Config, topic string, autoCreate bool) (*sarama.MetadataResponse, error) {
	b := sarama.NewBroker(addr)
	if err := b.Open(conf); err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }() // a probe connection; nothing to flush
	req := sarama.NewMetadataRequest(conf.Version, []string{topic})
	req.AllowAutoTopicCreation = autoCreate
	return b.GetMetadata(req)
}

// ProducerRejectedError is a message the broker refused, or sarama refused
// before sending (too large, not encodable). Sending it again is expected to
// fail the same way, so it spends one of the message's attempts.
type ProducerRejectedError struct {
	// Code is the Kafka error code, or 0 when sarama refused the message
	// before sending it.
	Code int16
	// Name is the protocol name of Code, such as INVALID_RECORD.
	Name string
	// Err is sarama's error.
	Err error
}

// Error names the code, which the relay stores as the row's last error.
func (e *ProducerRejectedError) Error() string {
	if e.Code == 0 {
		return fmt.Sprintf("kafka producer refused the message: %v", e.Err)
	}
	return fmt.Sprintf("kafka broker rejected the message: %s (%d): %v", e.Name, e.Code, e.Err)
}

// Unwrap returns sarama's error.
func (e *ProducerRejectedError) Unwrap() error { return e.Err }

// producerUnavailableCodes are the Kafka errors that say "not now" about the
// cluster, not "never" about the message: leadership moving, replicas
// missing, timeouts, a topic not (yet) there, and the idempotent producer's
// sequence state, which a fresh producer resets.
var producerUnavailableCodes = map[sarama.KError]bool{
	sarama.ErrUnknownTopicOrPartition:         true,
	sarama.ErrLeaderNotAvailable:              true,
	sarama.ErrNotLeaderForPartition:           true,
	sarama.ErrRequestTimedOut:                 true,
	sarama.ErrBrokerNotAvailable:              true,
	sarama.ErrReplicaNotAvailable:             true,
	sarama.ErrNetworkException:                true,
	sarama.ErrOffsetsLoadInProgress:           true,
	sarama.ErrConsumerCoordinatorNotAvailable: true,
	sarama.ErrNotCoordinatorForConsumer:       true,
	sarama.ErrNotEnoughReplicas:               true,
	sarama.ErrNotEnoughReplicasAfterAppend:    true,
	sarama.ErrNotController:                   true,
	sarama.ErrOutOfOrderSequenceNumber:        true,
	sarama.ErrInvalidProducerEpoch:            true,
	sarama.ErrConcurrentTransactions:          true,
	sarama.ErrKafkaStorageError:               true,
	sarama.ErrUnknownProducerID:               true,
	sarama.ErrFencedLeaderEpoch:               true,
	sarama.ErrUnknownLeaderEpoch:              true,
	sarama.ErrOffsetNotAvailable:              true,
	sarama.ErrPreferredLeaderNotAvailable:     true,
	sarama.ErrEligibleLeadersNotAvailable:     true,
	sarama.ErrThrottlingQuotaExceeded:         true,
}

// producerClassify turns a sarama send error into relay.ErrUnavailable (the
// cluster could not take it now) or a *ProducerRejectedError (this message
// was refused). Errors that are not Kafka codes are connection trouble
// (ErrOutOfBrokers, ErrNotConnected, ErrClosedClient, ErrShuttingDown,
// network errors, timeouts) unless sarama refused the message itself.
func producerClassify(err error) error {
	var kerrCode sarama.KError
	if errors.As(err, &kerrCode) {
		if producerUnavailableCodes[kerrCode] {
			return fmt.Errorf("%w: %s: %w", relay.ErrUnavailable, producerCodeName(int16(kerrCode)), err)
		}
		return &ProducerRejectedError{Code: int16(kerrCode), Name: producerCodeName(int16(kerrCode)), Err: err}
	}
	var confErr sarama.ConfigurationError
	var encErr sarama.PacketEncodingError
	if errors.As(err, &confErr) || errors.As(err, &encErr) {
		return &ProducerRejectedError{Err: err}
	}
	return fmt.Errorf("%w: %w", relay.ErrUnavailable, err)
}

// producerCodeName is the protocol name of a Kafka error code.
func producerCodeName(code int16) string {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) && ke.Code == code {
		return ke.Message
	}
	return fmt.Sprintf("ERROR_%d", code)
}

func producerFill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

var (
	_ relay.Publisher = (*Producer)(nil)
	_ relay.Pinger    = (*Producer)(nil)
)
