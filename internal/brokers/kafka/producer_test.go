package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest/sendertest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// producerTestConfig is a config with timeouts short enough for tests: an
// outage shows within a second or two.
func producerTestConfig(addr string) ProducerConfig {
	return ProducerConfig{
		Brokers:        []string{addr},
		SendTimeout:    10 * time.Second,
		DialTimeout:    time.Second,
		RequestTimeout: 3 * time.Second,
		AckTimeout:     time.Second,
		RetryBackoff:   20 * time.Millisecond,
	}
}

// producerTestEach runs fn with the transactional producer serve uses and
// with the idempotent one, in parallel subtests named after them, each on
// a broker of its own with producerTestConfig (a transactional id of its
// own for the first).
func producerTestEach(t *testing.T, fn func(t *testing.T, b *kafkatest.Broker, cfg ProducerConfig, transactional bool)) {
	for _, transactional := range []bool{true, false} {
		t.Run(map[bool]string{true: "Transactional", false: "Idempotent"}[transactional], func(t *testing.T) {
			t.Parallel()
			b := kafkatest.Start(t)
			cfg := producerTestConfig(b.Addr)
			if transactional {
				cfg.TransactionalID = fmt.Sprintf("each-%d", senders.Add(1))
			}
			fn(t, b, cfg, transactional)
		})
	}
}

func producerTestNew(t testing.TB, cfg ProducerConfig) *Producer {
	t.Helper()
	p, err := NewProducer(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// producerTestMessages builds n outbox rows with ids from firstID, spread
// over the post ids in posts, round robin.
func producerTestMessages(firstID int64, n int, posts ...int64) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		id := firstID + int64(i)
		post := posts[i%len(posts)]
		et := event.PostingEvent
		if i%2 == 1 {
			et = event.ReservationEvent
		}
		eventID := fmt.Sprintf("00000000-0000-7000-8000-%012d", id)
		// A value of the contract, so that the AsyncAPI check of every
		// record read back (kafkatest.ReadTopic) holds.
		payload := fmt.Sprintf(`{"eventId":%q,"eventType":%q,"postId":%d,"occurredAt":"2026-12-03T10:00:00Z","ownerId":"","scheduledAt":"2026-12-03T11:00:00Z"}`, eventID, et, post)
		if et == event.PostingEvent {
			payload = fmt.Sprintf(`{"eventId":%q,"eventType":%q,"postId":%d,"occurredAt":"2026-12-03T10:00:00Z","ownerId":"","action":"CREATED","status":"RESERVED","scheduledAt":"2026-12-03T11:00:00Z"}`, eventID, et, post)
		}
		msgs[i] = outbox.Message{
			ID:          id,
			EventID:     eventID,
			EventType:   string(et),
			AggregateID: post,
			Payload:     payload,
			Status:      outbox.StatusProcessing,
		}
	}
	return msgs
}

// producerTestPostsOnDistinctPartitions returns n post ids whose keys land
// on n different partitions.
func producerTestPostsOnDistinctPartitions(t testing.TB, n int, partitions int32) []int64 {
	t.Helper()
	seen := map[int32]bool{}
	var posts []int64
	for id := int64(1); len(posts) < n && id < 10000; id++ {
		p := kafkatest.PartitionFor(strconv.FormatInt(id, 10), partitions)
		if !seen[p] {
			seen[p] = true
			posts = append(posts, id)
		}
	}
	require.Len(t, posts, n)
	return posts
}

func producerTestRequireAllNil(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.NoError(t, err, "message %d", i)
	}
}

// TestProducerConformsToTheSenderSuite runs the relay's sender suite
// (internal/send/relay/relaytest/sendertest) on the in-process broker.
// The suite runs on the transactional producer serve uses and on the
// idempotent one (POSTING_KAFKA_TRANSACTIONS=false), one after the other:
// each runs four relays with pools of their own on every database, and both
// at once, beside the other packages, exhausted PostgreSQL's connections.
func TestProducerConformsToTheSenderSuite(t *testing.T) {
	t.Parallel()
	for _, transactional := range []bool{true, false} {
		t.Run(map[bool]string{true: "Transactional", false: "Idempotent"}[transactional], func(t *testing.T) {
			sendertest.Run(t, func(t *testing.T) sendertest.Broker {
				// A data dir: the broker keeps its records across Down and Up.
				return producerTestBroker{b: kafkatest.Start(t, kafkatest.WithDataDir(t.TempDir())), transactional: transactional}
			})
		})
	}
}

// producerTestBroker is the sender suite's view of a kafkatest broker.
type producerTestBroker struct {
	b             *kafkatest.Broker
	transactional bool // each sender gets a transactional id of its own
}

// senders numbers the transactional ids of the suite's senders.
var senders atomic.Int64

func (k producerTestBroker) NewSender(t testing.TB, o sendertest.Options) sendertest.Sender {
	cfg := producerTestConfig(k.b.Addr)
	cfg.Topic = k.b.Topic
	if k.transactional {
		cfg.TransactionalID = fmt.Sprintf("sender-%d", senders.Add(1))
	}
	if o.SendTimeout > 0 {
		// sarama's own timeouts well inside the bound: it retries within it.
		cfg.SendTimeout = o.SendTimeout
		cfg.DialTimeout = 100 * time.Millisecond
		cfg.RequestTimeout = 800 * time.Millisecond
		cfg.AckTimeout = 100 * time.Millisecond
	}
	return producerTestNew(t, cfg)
}

// Read also fails t unless every record sits on its topic, on the Java
// client's murmur2 partition of its key.
func (k producerTestBroker) Read(t testing.TB, atLeast int, timeout time.Duration) []sendertest.Arrived {
	t.Helper()
	recs := k.b.Records(t, atLeast, timeout)
	out := make([]sendertest.Arrived, len(recs))
	for i, r := range recs {
		require.Equal(t, k.b.Topic, r.Topic)
		require.Equal(t, kafkatest.PartitionFor(r.Key, k.b.Partitions), r.Partition, "the Java client's murmur2 partition")
		out[i] = sendertest.Arrived{Key: r.Key, EventID: r.Headers[event.HeaderEventID], EventType: r.Headers[event.HeaderEventType],
			Value: r.Value, Stream: strconv.Itoa(int(r.Partition))}
	}
	return out
}

func (k producerTestBroker) Reject(_ testing.TB, key string) func() {
	return k.b.RejectKey(key, kerr.InvalidRecord.Code)
}

// OtherKeys are on other partitions than key's: Kafka rejects a whole
// partition batch.
func (k producerTestBroker) OtherKeys(key int64, n int) []int64 {
	bad := kafkatest.PartitionFor(strconv.FormatInt(key, 10), k.b.Partitions)
	var out []int64
	for id := key + 1; len(out) < n; id++ {
		if kafkatest.PartitionFor(strconv.FormatInt(id, 10), k.b.Partitions) != bad {
			out = append(out, id)
		}
	}
	return out
}

func (producerTestBroker) IsRejection(err error) bool {
	var rej *ProducerRejectedError
	return errors.As(err, &rej)
}

func (producerTestBroker) RejectReason() string { return "INVALID_RECORD (87)" }

func (k producerTestBroker) Rejections(key string) int { return k.b.Rejections(key) }

func (k producerTestBroker) Down(testing.TB) { k.b.Stop() }

func (k producerTestBroker) Up(t testing.TB) { k.b.Restart(t) }

// Stall swallows produce requests: sarama waits for its read timeout,
// retries, waits again, and Send must give up at SendTimeout.
func (k producerTestBroker) Stall(testing.TB) func() {
	silent := make(chan struct{})
	c := k.b.Cluster
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

// Each broker code is a rejection or unavailable, for that partition's
// messages only, on both producers; the transactional one answers at once
// and commits only the other partition's messages. Not REQUEST_TIMED_OUT
// on the transactional path: franz-go cannot know whether such a batch was
// written and waits for it until Send gives up (see
// TestProducerPartitionTimingOutFailsItsMessagesOrTheWholeTransaction).
func TestProducerClassifiesBrokerCodes(t *testing.T) {
	t.Parallel()
	producerTestEach(t, func(t *testing.T, b *kafkatest.Broker, cfg ProducerConfig, transactional bool) {
		p := producerTestNew(t, cfg)
		posts := producerTestPostsOnDistinctPartitions(t, 2, b.Partitions)
		bad, good := posts[0], posts[1]
		nextID := int64(1)
		var want int
		for _, tc := range []struct {
			code        *kerr.Error
			unavailable bool
		}{
			{kerr.InvalidRecord, false},
			{kerr.MessageTooLarge, false},
			{kerr.CorruptMessage, false}, // sarama retries it, then gives up
			{kerr.PolicyViolation, false},
			{kerr.TopicAuthorizationFailed, false},
			{kerr.NotEnoughReplicas, true},
			{kerr.NotLeaderForPartition, true},
			{kerr.RequestTimedOut, true},
		} {
			if transactional && tc.code == kerr.RequestTimedOut {
				continue
			}
			stop := b.RejectKey(strconv.FormatInt(bad, 10), tc.code.Code)
			msgs := producerTestMessages(nextID, 4, bad, good)
			nextID += int64(len(msgs))
			start := time.Now()
			errs := p.Send(context.Background(), relay.Envelopes(msgs))
			stop()
			if transactional {
				require.Less(t, time.Since(start), cfg.SendTimeout/2, "%s: Send took", tc.code.Message)
			}
			for i, m := range msgs {
				if m.AggregateID == good {
					require.NoError(t, errs[i], "%s: the other partition", tc.code.Message)
					want++
					continue
				}
				if tc.unavailable {
					require.ErrorIs(t, errs[i], relay.ErrUnavailable, tc.code.Message)
					var unanswered *relay.UnansweredError
					require.False(t, errors.As(errs[i], &unanswered), "%s: answered, not held", tc.code.Message)
				} else {
					var rej *ProducerRejectedError
					require.ErrorAs(t, errs[i], &rej, tc.code.Message)
					require.Equal(t, tc.code.Code, rej.Code)
					require.NotErrorIs(t, errs[i], relay.ErrUnavailable)
				}
				require.Contains(t, errs[i].Error(), tc.code.Message)
			}
		}
		producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(nextID, 4, bad, good))))
		if transactional {
			want += 4
			require.Len(t, b.Records(t, want, 30*time.Second), want, "the committed messages, none of an aborted transaction")
		}
	})
}

func TestProducerRefusesOversizedMessageAlone(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.MaxMessageBytes = 1024
	p := producerTestNew(t, cfg)
	msgs := producerTestMessages(1, 3, 1, 2, 3)
	msgs[1].Payload = `{"big":"` + strings.Repeat("x", 2000) + `"}`

	errs := p.Send(context.Background(), relay.Envelopes(msgs))
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	var rej *ProducerRejectedError
	require.ErrorAs(t, errs[1], &rej)
	require.Zero(t, rej.Code, "refused by sarama before sending")
	require.NotErrorIs(t, errs[1], relay.ErrUnavailable)
	require.Len(t, b.Records(t, 2, 10*time.Second), 2)
}

// TestProducerCheckTopic: the topic check tells a missing topic from a
// cluster that does not answer (Ping itself is a case of the sender suite).
func TestProducerCheckTopic(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	require.NoError(t, p.Ping(context.Background()))
	require.NoError(t, p.CheckTopic(context.Background()))

	cfg := producerTestConfig(b.Addr)
	cfg.Topic = "no-such-topic"
	missing := producerTestNew(t, cfg)
	require.NoError(t, missing.Ping(context.Background()), "the cluster answers")
	err := missing.CheckTopic(context.Background())
	require.ErrorIs(t, err, ErrProducerTopicMissing)
	require.Contains(t, err.Error(), `"no-such-topic"`)

	b.Stop()
	require.ErrorIs(t, p.Ping(context.Background()), relay.ErrUnavailable)
	require.ErrorIs(t, p.CheckTopic(context.Background()), relay.ErrUnavailable)
}

func TestNewProducerValidates(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]ProducerConfig{
		"no brokers":       {},
		"bad broker":       {Brokers: []string{"localhost"}},
		"short timeout":    {Brokers: []string{"h:1"}, SendTimeout: time.Millisecond},
		"ack after read":   {Brokers: []string{"h:1"}, AckTimeout: 20 * time.Second},
		"too many retries": {Brokers: []string{"h:1"}, Retries: 11},
		"old kafka":        {Brokers: []string{"h:1"}, KafkaVersion: "0.10.2.0"},
		"send below one":   {Brokers: []string{"h:1"}, SendTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second},
	} {
		_, err := NewProducer(cfg, nil)
		require.ErrorContains(t, err, "invalid kafka producer config", name)
	}
	p, err := NewProducer(ProducerConfig{Brokers: []string{"127.0.0.1:1"}}, nil)
	require.NoError(t, err)
	require.Equal(t, event.DefaultTopic, p.Config().Topic)
	require.Equal(t, 30*time.Second, p.Config().SendTimeout)
	require.NoError(t, p.Close())
}

func TestProducerClassify(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		sarama.ErrOutOfBrokers, sarama.ErrNotConnected, sarama.ErrClosedClient, sarama.ErrShuttingDown,
		sarama.ErrIncompleteResponse, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition,
		sarama.ErrRequestTimedOut, sarama.ErrNetworkException, sarama.ErrNotEnoughReplicas,
		sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrOutOfOrderSequenceNumber, sarama.ErrProducerFenced,
		sarama.ErrInvalidTxnState, context.DeadlineExceeded,
		fmt.Errorf("dial tcp: %w", errors.New("connection refused")),
	} {
		require.ErrorIs(t, producerClassify(err), relay.ErrUnavailable, "%v", err)
		require.ErrorIs(t, producerClassify(err), err, "keeps the cause")
	}
	for _, err := range []error{
		sarama.ErrInvalidRecord, sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidMessage, sarama.ErrPolicyViolation,
		sarama.ErrTopicAuthorizationFailed, sarama.ErrUnknown, sarama.ConfigurationError("too large"),
	} {
		got := producerClassify(err)
		require.NotErrorIs(t, got, relay.ErrUnavailable, "%v", err)
		var rej *ProducerRejectedError
		require.ErrorAs(t, got, &rej, "%v", err)
	}
	require.Equal(t, "kafka broker rejected the message: POLICY_VIOLATION (44): "+sarama.ErrPolicyViolation.Error(),
		producerClassify(sarama.ErrPolicyViolation).Error())
}

// BenchmarkSend sends batches of 500, and single messages, to the
// in-process broker with the transactional producer serve uses and with
// the idempotent one, and reports messages per second and the time of one
// Send: the cost of a transaction per batch, as a ratio in one run.
//
//	go test -run '^$' -bench Send -benchtime 3s ./internal/brokers/kafka/
func BenchmarkSend(b *testing.B) {
	broker := kafkatest.Start(b)
	var posts []int64
	for i := range 200 {
		posts = append(posts, int64(i+1))
	}
	for _, batch := range []int{500, 1} {
		for _, transactional := range []bool{false, true} {
			name := fmt.Sprintf("batch=%d/%s", batch, map[bool]string{true: "transactional", false: "idempotent"}[transactional])
			b.Run(name, func(b *testing.B) {
				cfg := producerTestConfig(broker.Addr)
				if transactional {
					cfg.TransactionalID = fmt.Sprintf("bench-%d", senders.Add(1))
				}
				p := producerTestNew(b, cfg)
				msgs := producerTestMessages(1, batch, posts[:min(batch, len(posts))]...)
				producerTestRequireAllNil(b, p.Send(context.Background(), relay.Envelopes(msgs))) // connect
				b.ResetTimer()
				start := time.Now()
				for b.Loop() {
					for _, err := range p.Send(context.Background(), relay.Envelopes(msgs)) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}

// compressionTestCodecs records the compression codec (the low three bits
// of the batch attributes) of every record batch the broker is asked to
// write, by codec number: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
func compressionTestCodecs(b *kafkatest.Broker) func() map[int8]int {
	var mu sync.Mutex
	codecs := map[int8]int{}
	c := b.Cluster
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var batch kmsg.RecordBatch
				if batch.ReadFrom(rp.Records) == nil {
					codecs[int8(batch.Attributes&0x0007)]++
				}
			}
		}
		return nil, nil, false // observe only; the cluster writes the batch
	})
	return func() map[int8]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[int8]int{}
		for k, v := range codecs {
			out[k] = v
		}
		return out
	}
}

// kcatRecord is one line of `kcat -C -J`.
type kcatRecord struct {
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Key       string   `json:"key"`
	Payload   string   `json:"payload"`
	Headers   []string `json:"headers"` // name, value, name, value...
}

// compressionTestKcat reads the whole topic with kcat (librdkafka), a client
// independent of sarama and franz-go. Without kcat on the PATH the test is
// skipped (ran is false), unless POSTING_TEST_REQUIRE_KCAT=1 makes it fail.
func compressionTestKcat(t *testing.T, addr, topic string) (recs []kcatRecord, ran bool) {
	t.Helper()
	bin, ok := kafkatest.Kcat(t)
	if !ok {
		t.Log("kcat not on the PATH: the kcat read is skipped (apt-get install kcat)")
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q", "-J")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kcat: %s", stderr.String())
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r kcatRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "kcat line %s", sc.Text())
		recs = append(recs, r)
	}
	require.NoError(t, sc.Err())
	return recs, true
}

// Each codec: the producer sends batches compressed with it, and three
// independent clients read every message back intact: franz-go (kgo,
// kafkatest.ReadTopic), kcat (librdkafka) and the worker's sarama consumer.
func TestProducerCompressionReadByOtherClients(t *testing.T) {
	t.Parallel()
	for _, c := range Compressions() {
		t.Run(string(c), func(t *testing.T) {
			t.Parallel()
			b := kafkatest.Start(t)
			codecs := compressionTestCodecs(b)
			cfg := producerTestConfig(b.Addr)
			cfg.Compression = c
			p := producerTestNew(t, cfg)
			msgs := producerTestMessages(1, 60, 11, 12, 13, 14)
			producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))

			want, ok := c.codec()
			require.True(t, ok)
			seen := codecs()
			require.Len(t, seen, 1, "one codec for every batch: %v", seen)
			require.Positive(t, seen[int8(want)], "batches compressed with %s: %v", c, seen)

			wantValue := map[string]string{}
			for _, m := range msgs {
				wantValue[m.EventID] = string(event.WithSequence([]byte(m.Payload), m.ID))
			}

			recs := b.Records(t, len(msgs), 10*time.Second)
			require.Len(t, recs, len(msgs), "franz-go")
			for _, r := range recs {
				require.Equal(t, wantValue[r.Headers[event.HeaderEventID]], string(r.Value), "franz-go")
			}

			if krecs, ran := compressionTestKcat(t, b.Addr, b.Topic); ran {
				require.Len(t, krecs, len(msgs), "kcat")
				for _, r := range krecs {
					headers := map[string]string{}
					for i := 0; i+1 < len(r.Headers); i += 2 {
						headers[r.Headers[i]] = r.Headers[i+1]
					}
					require.Equal(t, wantValue[headers[event.HeaderEventID]], r.Payload, "kcat")
					require.Equal(t, kafkatest.PartitionFor(r.Key, b.Partitions), r.Partition, "kcat")
				}
			}

			h := &consumerTestHandler{}
			consumerTestStart(t, b.Addr, "compression-"+string(c), h, nil)
			require.Eventually(t, func() bool { return len(h.snapshot()) == len(msgs) }, 20*time.Second, 20*time.Millisecond, "sarama consumer")
			for _, ev := range h.snapshot() {
				require.JSONEq(t, wantValue[ev.EventID], string(ev.Value), "sarama consumer")
			}
		})
	}
}

func TestProducerConfigCompression(t *testing.T) {
	t.Parallel()
	require.Equal(t, CompressionNone, DefaultProducerConfig().Compression, "the Java client's default, read by every consumer")
	base := producerTestConfig("127.0.0.1:1").withDefaults()
	require.NoError(t, base.Validate())
	for _, c := range Compressions() {
		cfg := base
		cfg.Compression = c
		require.NoError(t, cfg.Validate(), "%s", c)
	}

	for _, tc := range []struct {
		compression Compression
		version     string
	}{
		{"brotli", "2.8.0"},
		{"LZ4", "2.8.0"}, // the names are lower case, as Java's compression.type
		{CompressionZstd, "2.0.0"},
	} {
		cfg := base
		cfg.Compression, cfg.KafkaVersion = tc.compression, tc.version
		err := cfg.Validate()
		var ce *config.Error
		require.ErrorAs(t, err, &ce, "%+v", tc)
		require.Equal(t, "kafka.ProducerConfig.Compression", ce.Field)
		require.Equal(t, string(tc.compression), ce.Value)
		_, err = NewProducer(cfg, nil)
		require.ErrorContains(t, err, "invalid kafka producer config")
	}
}

// A record read back from the broker is a CloudEvent in the binary content
// mode of the CloudEvents Kafka protocol binding 1.0, checked header by
// header against the binding and the core spec (the SDK's Kafka binding,
// github.com/cloudevents/sdk-go/protocol/kafka_sarama, is not on the module
// proxy): every ce_ header a known attribute with a valid UTF-8 value,
// specversion 1.0, id, source (a URI reference) and type non-empty, time in
// RFC 3339 equal to the value's occurredAt, datacontenttype in the
// content-type header and the value the event data as it is. The contract's
// headers stay, and the traceparent travels when the row has one.
func TestRecordsAreCloudEventsInBinaryMode(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	at := time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC)
	msgs := reservationtest.Batch(t, at) // the second has no traceparent: no header
	tp := reservationtest.Traceparent
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))

	recs := b.Records(t, 2, 10*time.Second)
	require.Len(t, recs, 2)
	known := map[string]bool{"specversion": true, "id": true, "source": true, "type": true, "time": true, "sequence": true,
		"subject": true, "dataschema": true}
	for i, r := range recs {
		m := msgs[i]
		require.Equal(t, m.EventID, r.Headers[event.HeaderEventID])
		require.Equal(t, m.EventType, r.Headers[event.HeaderEventType])
		if i == 0 {
			require.Equal(t, tp, r.Headers[event.HeaderTraceparent])
		} else {
			require.NotContains(t, r.Headers, event.HeaderTraceparent, "a row without a traceparent sends none")
		}
		attrs := map[string]string{}
		for k, v := range r.Headers {
			require.True(t, utf8.ValidString(v), "header %s", k)
			if name, ok := strings.CutPrefix(k, "ce_"); ok {
				require.True(t, known[name], "unknown attribute header %s", k)
				attrs[name] = v
			}
		}
		require.Equal(t, "1.0", attrs["specversion"])
		require.Equal(t, m.EventID, attrs["id"])
		require.Equal(t, m.EventType, attrs["type"])
		require.NotEmpty(t, attrs["source"])
		_, err := url.Parse(attrs["source"])
		require.NoError(t, err, "source is not a URI reference")
		ceTime, err := time.Parse(time.RFC3339, attrs["time"])
		require.NoError(t, err)
		require.True(t, ceTime.Equal(at), "ce_time %s", attrs["time"])
		require.Equal(t, "application/json", r.Headers["content-type"])
		require.NotContains(t, attrs, "datacontenttype", "binary mode carries it as content-type")

		var v struct{ OccurredAt string }
		require.NoError(t, json.Unmarshal(r.Value, &v))
		require.Equal(t, v.OccurredAt, attrs["time"], "ce_time and occurredAt differ")
		require.Equal(t, event.FormatSequence(m.ID), attrs["sequence"], "ce_sequence is the row id, 20 digits")
		require.JSONEq(t, string(event.WithSequence([]byte(m.Payload), m.ID)), string(r.Value), "the value is the event data with its sequence")
	}
}
