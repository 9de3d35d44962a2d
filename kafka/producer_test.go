package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
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

func producerTestRequireAllUnavailable(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		var rej *ProducerRejectedError
		require.False(t, errors.As(err, &rej), "message %d: an outage is never a rejection: %v", i, err)
	}
}

// producerTestEventIDs returns the event-id headers of records, in order.
func producerTestEventIDs(recs []kafkatest.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Headers[event.HeaderEventID]
	}
	return out
}

func TestProducerSendsBatchInKeyOrder(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	var posts []int64
	for i := range 40 {
		posts = append(posts, int64(1000+i))
	}
	msgs := producerTestMessages(1, 1000, posts...)

	producerTestRequireAllNil(t, p.Send(context.Background(), msgs))

	recs := b.Records(t, len(msgs), 10*time.Second)
	require.Len(t, recs, len(msgs))
	byEventID := map[string]outbox.Message{}
	for _, m := range msgs {
		byEventID[m.EventID] = m
	}
	lastID := map[string]int64{}
	partitionOf := map[string]int32{}
	for _, r := range recs {
		m, ok := byEventID[r.Headers[event.HeaderEventID]]
		require.True(t, ok, "unknown event id %q", r.Headers[event.HeaderEventID])
		require.Equal(t, b.Topic, r.Topic)
		require.Equal(t, strconv.FormatInt(m.AggregateID, 10), r.Key, "key is the post id")
		require.Equal(t, string(event.WithSequence([]byte(m.Payload), m.ID)), string(r.Value), "the row's value with its sequence")
		require.Equal(t, string(m.EventType), r.Headers[event.HeaderEventType])
		require.Equal(t, kafkatest.PartitionFor(r.Key, b.Partitions), r.Partition, "the Java client's murmur2 partition")
		if p, ok := partitionOf[r.Key]; ok {
			require.Equal(t, p, r.Partition, "same key, same partition")
		}
		partitionOf[r.Key] = r.Partition
		require.Greater(t, m.ID, lastID[r.Key], "key %s out of outbox order", r.Key)
		lastID[r.Key] = m.ID
		delete(byEventID, r.Headers[event.HeaderEventID])
	}
	require.Empty(t, byEventID, "every message exactly once")
	require.Len(t, partitionOf, len(posts))
}

func TestProducerRejectionFailsOnlyItsPartitionAndLaterSendsWork(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	posts := producerTestPostsOnDistinctPartitions(t, 4, b.Partitions)
	bad := posts[0]
	stop := b.RejectKey(strconv.FormatInt(bad, 10), kerr.InvalidRecord.Code)

	var want []string // event ids that must reach the topic
	nextID := int64(1)
	for round := range 3 { // rejections again and again must not wedge the producer
		msgs := producerTestMessages(nextID, 40, posts...)
		nextID += int64(len(msgs))
		errs := p.Send(context.Background(), msgs)
		require.Len(t, errs, len(msgs))
		for i, m := range msgs {
			if m.AggregateID != bad {
				require.NoError(t, errs[i], "round %d: post %d is on another partition", round, m.AggregateID)
				want = append(want, m.EventID)
				continue
			}
			require.Error(t, errs[i])
			require.NotErrorIs(t, errs[i], relay.ErrUnavailable, "a rejection is not an outage")
			var rej *ProducerRejectedError
			require.ErrorAs(t, errs[i], &rej)
			require.Equal(t, kerr.InvalidRecord.Code, rej.Code)
			require.Contains(t, errs[i].Error(), "INVALID_RECORD (87)")
		}
	}
	require.Positive(t, b.Rejections(strconv.FormatInt(bad, 10)))

	stop()
	msgs := producerTestMessages(nextID, 40, posts...)
	producerTestRequireAllNil(t, p.Send(context.Background(), msgs))
	for _, m := range msgs {
		want = append(want, m.EventID)
	}
	recs := b.Records(t, len(want), 10*time.Second)
	require.ElementsMatch(t, want, producerTestEventIDs(recs))
}

func TestProducerClassifiesBrokerCodes(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	posts := producerTestPostsOnDistinctPartitions(t, 2, b.Partitions)
	bad, good := posts[0], posts[1]
	nextID := int64(1)
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
		stop := b.RejectKey(strconv.FormatInt(bad, 10), tc.code.Code)
		msgs := producerTestMessages(nextID, 4, bad, good)
		nextID += int64(len(msgs))
		errs := p.Send(context.Background(), msgs)
		stop()
		for i, m := range msgs {
			if m.AggregateID == good {
				require.NoError(t, errs[i], "%s: the other partition", tc.code.Message)
				continue
			}
			if tc.unavailable {
				require.ErrorIs(t, errs[i], relay.ErrUnavailable, tc.code.Message)
			} else {
				var rej *ProducerRejectedError
				require.ErrorAs(t, errs[i], &rej, tc.code.Message)
				require.Equal(t, tc.code.Code, rej.Code)
				require.NotErrorIs(t, errs[i], relay.ErrUnavailable)
			}
			require.Contains(t, errs[i].Error(), tc.code.Message)
		}
	}
	producerTestRequireAllNil(t, p.Send(context.Background(), producerTestMessages(nextID, 4, bad, good)))
}

func TestProducerRefusesOversizedMessageAlone(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.MaxMessageBytes = 1024
	p := producerTestNew(t, cfg)
	msgs := producerTestMessages(1, 3, 1, 2, 3)
	msgs[1].Payload = `{"big":"` + strings.Repeat("x", 2000) + `"}`

	errs := p.Send(context.Background(), msgs)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	var rej *ProducerRejectedError
	require.ErrorAs(t, errs[1], &rej)
	require.Zero(t, rej.Code, "refused by sarama before sending")
	require.NotErrorIs(t, errs[1], relay.ErrUnavailable)
	require.Len(t, b.Records(t, 2, 10*time.Second), 2)
}

func TestProducerOutageIsUnavailableAndRecoversAfterRestart(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithDataDir(t.TempDir()))
	p := producerTestNew(t, producerTestConfig(b.Addr))
	posts := []int64{1, 2, 3, 4, 5}
	before := producerTestMessages(1, 20, posts...)
	producerTestRequireAllNil(t, p.Send(context.Background(), before))

	b.Stop()
	for round := range 3 {
		errs := p.Send(context.Background(), producerTestMessages(100+int64(round)*20, 20, posts...))
		producerTestRequireAllUnavailable(t, errs)
		for _, err := range errs {
			require.NotContains(t, err.Error(), "send timeout", "sarama answered within its own bounds")
		}
	}
	require.ErrorIs(t, p.Ping(context.Background()), relay.ErrUnavailable)

	b.Restart(t)
	after := producerTestMessages(200, 20, posts...)
	producerTestRequireAllNil(t, p.Send(context.Background(), after))
	require.NoError(t, p.Ping(context.Background()))

	recs := b.Records(t, len(before)+len(after), 10*time.Second)
	var want []string
	for _, m := range append(before, after...) {
		want = append(want, m.EventID)
	}
	require.ElementsMatch(t, want, producerTestEventIDs(recs))
}

func TestProducerStartsWhileBrokerDown(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	b.Stop()

	p, err := NewProducer(producerTestConfig(b.Addr), nil)
	require.NoError(t, err, "no connection at construction")
	t.Cleanup(func() { _ = p.Close() })
	producerTestRequireAllUnavailable(t, p.Send(context.Background(), producerTestMessages(1, 5, 1, 2)))

	b.Restart(t)
	msgs := producerTestMessages(10, 5, 1, 2)
	producerTestRequireAllNil(t, p.Send(context.Background(), msgs))
	require.Len(t, b.Records(t, len(msgs), 10*time.Second), len(msgs))
}

func TestProducerSendTimeoutBoundsSend(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.SendTimeout = time.Second
	cfg.DialTimeout = 100 * time.Millisecond
	cfg.RequestTimeout = 800 * time.Millisecond
	cfg.AckTimeout = 100 * time.Millisecond
	p := producerTestNew(t, cfg)
	producerTestRequireAllNil(t, p.Send(context.Background(), producerTestMessages(1, 2, 1)))

	// The broker swallows produce requests: sarama waits for its read
	// timeout, retries, waits again; Send must give up at SendTimeout.
	silent := make(chan struct{})
	b.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-silent:
			return nil, nil, false
		default:
			b.Cluster.KeepControl()
			return nil, nil, true // no answer at all
		}
	})
	errs := p.Send(context.Background(), producerTestMessages(10, 2, 1))
	producerTestRequireAllUnavailable(t, errs)
	require.Contains(t, errs[0].Error(), "send timeout")

	close(silent)
	require.Eventually(t, func() bool {
		for _, err := range p.Send(context.Background(), producerTestMessages(20, 2, 1)) {
			if err != nil {
				require.ErrorIs(t, err, relay.ErrUnavailable)
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "publishing works again once the broker answers")
}

func TestProducerPingAndCheckTopic(t *testing.T) {
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

func TestProducerCloseThenSend(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	producerTestRequireAllNil(t, p.Send(context.Background(), producerTestMessages(1, 2, 1)))
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	producerTestRequireAllUnavailable(t, p.Send(context.Background(), producerTestMessages(3, 2, 1)))
	require.Empty(t, p.Send(context.Background(), nil))
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
		sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrOutOfOrderSequenceNumber, context.DeadlineExceeded,
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

// BenchmarkSend sends batches of 500 to the in-process broker and reports
// messages per second.
func BenchmarkSend(b *testing.B) {
	broker := kafkatest.Start(b)
	p := producerTestNew(b, producerTestConfig(broker.Addr))
	var posts []int64
	for i := range 200 {
		posts = append(posts, int64(i+1))
	}
	const batch = 500
	msgs := producerTestMessages(1, batch, posts...)
	producerTestRequireAllNil(b, p.Send(context.Background(), msgs)) // connect
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		for _, err := range p.Send(context.Background(), msgs) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
}
