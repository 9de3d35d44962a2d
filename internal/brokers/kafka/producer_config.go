package kafka

import (
	"net"
	"strings"
	"time"
	"unicode"

	"github.com/IBM/sarama"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
)

// ProducerConfig configures a Producer. The zero value of every field but
// Brokers means its default.
//
// Timing: Send returns within SendTimeout of being called, whatever the
// network does, because it enforces that bound itself (see Producer.Send);
// the relay's stale limit (relay.Config.StaleAfter) must exceed it. sarama's
// own timeouts sit below it so that on an ordinary outage (connection
// refused, a leader election) sarama answers first, with a precise error: one
// attempt of a batch costs at most DialTimeout + 2*RequestTimeout (write the
// request, read the ack, which the leader sends within AckTimeout), after a
// metadata refresh bounded by DialTimeout+RequestTimeout, and a batch gets
// 1+Retries attempts RetryBackoff apart. Only a network that swallows packets
// makes sarama take longer, up to (1+Retries)*(2*DialTimeout+3*RequestTimeout)
// + Retries*RetryBackoff (about 2.5 minutes with the defaults); at
// SendTimeout Send gives up instead: it tears down every connection of
// that sarama producer (so the request can no longer land) and reports a
// relay.UnansweredError, whose rows the relay holds until sarama has
// returned; later calls report unavailable until then, so two batches are
// never in flight.
type ProducerConfig struct {
	// Brokers is the bootstrap list, host:port each. Required, at least one.
	Brokers []string
	// Topic receives every event. Default event.DefaultTopic.
	Topic string
	// ClientID names the connections in broker logs and quotas. Default
	// "posting".
	ClientID string
	// SendTimeout bounds one Send, from the call until every message has
	// an outcome, including waiting for an earlier Send and connecting.
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
	// Compression is the codec of the record batches the producer sends
	// (sarama Producer.Compression, at the codec's default level): one of
	// Compressions(). Default CompressionNone, as the Java client's
	// compression.type: every consumer reads it, while a codec is read only
	// by the clients that carry it (kafkajs reads gzip alone without extra
	// packages, and stops at the first lz4, snappy or zstd batch). gzip,
	// snappy, lz4 and zstd are opt-in; zstd also needs KafkaVersion and the
	// brokers at 2.1.0 or later. MaxMessageBytes bounds the uncompressed
	// message; the broker checks the compressed batch.
	Compression Compression
	// TransactionalID, when set, makes the producer transactional (it
	// then sends with franz-go: sarama's transactional producer races in
	// its error paths, IBM/sarama#2913): each Send is one transaction,
	// committed once every message is acknowledged, and each new client
	// (after any failure) takes the id's next epoch, which fences the
	// requests of the one before it. A send that got no answer (a stalled route) is never
	// committed, so a late copy of it is refused by the broker or
	// aborted, and consumers reading with isolation.level=read_committed
	// never see it after a later event of its post. Each instance needs an
	// id of its own, stable across its restarts; empty: idempotent only,
	// without that fencing. No control characters.
	TransactionalID string
	// Dial opens the producer's broker connections (tests put a faulty
	// network there). Default: a net.Dialer bounded by DialTimeout. Every
	// connection a producer opens is torn down when a send gets no answer
	// within SendTimeout (see Producer.Send).
	Dial DialFunc
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
		Compression:     CompressionNone,
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
	if err := config.CheckDurations(f, []config.Duration{
		{Name: "SendTimeout", Value: cfg.SendTimeout, Min: time.Second, Max: 10 * time.Minute},
		{Name: "DialTimeout", Value: cfg.DialTimeout, Min: 100 * time.Millisecond, Max: time.Minute},
		{Name: "RequestTimeout", Value: cfg.RequestTimeout, Min: 100 * time.Millisecond, Max: 5 * time.Minute},
		{Name: "AckTimeout", Value: cfg.AckTimeout, Min: 10 * time.Millisecond, Max: 5 * time.Minute},
		{Name: "RetryBackoff", Value: cfg.RetryBackoff, Min: time.Millisecond, Max: 10 * time.Second},
		{Name: "ProbeTimeout", Value: cfg.ProbeTimeout, Min: 100 * time.Millisecond, Max: time.Minute},
	}); err != nil {
		return err
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
	if strings.ContainsFunc(cfg.TransactionalID, unicode.IsControl) {
		return config.Invalid(f+"TransactionalID", cfg.TransactionalID, "a control character")
	}
	if _, ok := cfg.Compression.codec(); !ok {
		return config.Invalid(f+"Compression", string(cfg.Compression), "want one of %s", compressionNames())
	}
	if cfg.Compression == CompressionZstd && !v.IsAtLeast(sarama.V2_1_0_0) {
		return config.Invalid(f+"Compression", string(cfg.Compression), "zstd needs KafkaVersion 2.1.0 or later, got %s", cfg.KafkaVersion)
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
	// The Java client's murmur2 partitioning (partitioner.go): the same
	// post always lands on the same partition, the one a Java, Spring or
	// Kafka Streams producer would pick for its key.
	c.Producer.Partitioner = newPartitioner
	codec, ok := cfg.Compression.codec()
	if !ok {
		return nil, config.Invalid("kafka.ProducerConfig.Compression", string(cfg.Compression), "want one of %s", compressionNames())
	}
	c.Producer.Compression = codec
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// TransactionTimeout is how long the broker lets a transaction of this
// producer stay open before it aborts it: SendTimeout + RequestTimeout,
// 40 s with the defaults and at most 15 m (the broker's default
// transaction.max.timeout.ms).
func (cfg ProducerConfig) TransactionTimeout() time.Duration {
	return cfg.SendTimeout + cfg.RequestTimeout
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

// Compression is the codec the producer compresses record batches with
// (ProducerConfig.Compression); consumers decompress whatever the batch
// says, so changing it needs nothing downstream beyond a client that knows
// the codec.
type Compression string

// The codecs the producer offers; the Java client's compression.type names.
const (
	CompressionNone   Compression = "none"
	CompressionGzip   Compression = "gzip"
	CompressionSnappy Compression = "snappy"
	CompressionLZ4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
)

// Compressions lists the codecs in the order help texts show them.
func Compressions() []Compression {
	return []Compression{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLZ4, CompressionZstd}
}

// codec is sarama's name for c; ok is false for an unknown codec.
func (c Compression) codec() (codec sarama.CompressionCodec, ok bool) {
	switch c {
	case CompressionNone:
		return sarama.CompressionNone, true
	case CompressionGzip:
		return sarama.CompressionGZIP, true
	case CompressionSnappy:
		return sarama.CompressionSnappy, true
	case CompressionLZ4:
		return sarama.CompressionLZ4, true
	case CompressionZstd:
		return sarama.CompressionZSTD, true
	}
	return sarama.CompressionNone, false
}

// compressionNames is the list of codecs for error messages.
func compressionNames() string {
	cs := Compressions()
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}
