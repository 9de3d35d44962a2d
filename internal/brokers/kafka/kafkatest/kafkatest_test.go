package kafkatest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
)

// kafkatestClient is a franz-go producer that places records with the same
// hash as sarama, so keys land where PartitionFor says.
func kafkatestClient(t *testing.T, b *kafkatest.Broker) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addr),
		kgo.DefaultProduceTopic(b.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(2),
		kgo.RecordDeliveryTimeout(10*time.Second),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func kafkatestRecord(b *kafkatest.Broker, key, value string) *kgo.Record {
	return &kgo.Record{
		Key:       []byte(key),
		Value:     []byte(value),
		Partition: kafkatest.PartitionFor(key, b.Partitions),
		Headers:   []kgo.RecordHeader{{Key: "event-id", Value: []byte("id-" + value)}},
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	require.Equal(t, kafkatest.DefaultTopic, b.Topic)
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, b.Addr)
	cl := kafkatestClient(t, b)

	var recs []*kgo.Record
	for i := range 50 {
		recs = append(recs, kafkatestRecord(b, fmt.Sprint(i%5), fmt.Sprint(i)))
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

	got := b.RawRecords(t, 50, 10*time.Second)
	require.Len(t, got, 50)
	seen := map[string]int{}
	for i, r := range got {
		require.Equal(t, b.Topic, r.Topic)
		require.Equal(t, kafkatest.PartitionFor(r.Key, b.Partitions), r.Partition)
		require.Equal(t, "id-"+string(r.Value), r.Headers["event-id"])
		if i > 0 && got[i-1].Partition == r.Partition {
			require.Equal(t, got[i-1].Offset+1, r.Offset, "sorted by offset")
		}
		var v int
		_, err := fmt.Sscan(string(r.Value), &v)
		require.NoError(t, err)
		if prev, ok := seen[r.Key]; ok {
			require.Greater(t, v, prev, "per-key order")
		}
		seen[r.Key] = v
	}
	require.Len(t, seen, 5)
}

func TestRejectKeyAffectsOnlyItsPartition(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cl := kafkatestClient(t, b)
	bad, good := "7", "2" // partitions 3 and 0 of 8
	require.NotEqual(t, kafkatest.PartitionFor(bad, b.Partitions), kafkatest.PartitionFor(good, b.Partitions))

	stop := b.RejectKey(bad, kerr.InvalidRecord.Code)
	for range 3 { // the control stays armed request after request
		res := cl.ProduceSync(context.Background(), kafkatestRecord(b, bad, "x"), kafkatestRecord(b, good, "y"))
		require.Len(t, res, 2)
		for _, r := range res {
			if string(r.Record.Key) == bad {
				require.True(t, errors.Is(r.Err, kerr.InvalidRecord), "got %v", r.Err)
			} else {
				require.NoError(t, r.Err)
			}
		}
	}
	require.Equal(t, 3, b.Rejections(bad))
	require.Zero(t, b.Rejections(good))

	stop()
	require.NoError(t, cl.ProduceSync(context.Background(), kafkatestRecord(b, bad, "z")).FirstErr())
	got := b.RawRecords(t, 4, 10*time.Second)
	var values []string
	for _, r := range got {
		values = append(values, r.Key+"="+string(r.Value))
	}
	require.ElementsMatch(t, []string{good + "=y", good + "=y", good + "=y", bad + "=z"}, values)
	require.Equal(t, 3, b.Rejections(bad))
}

func TestRestartKeepsDataWithDataDir(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("restart", 2), kafkatest.WithDataDir(t.TempDir()))
	require.Equal(t, int32(2), b.Partitions)
	addr := b.Addr
	cl := kafkatestClient(t, b)
	require.NoError(t, cl.ProduceSync(context.Background(), kafkatestRecord(b, "1", "before")).FirstErr())

	b.Stop()
	b.Stop() // idempotent
	_, err := net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the broker is down")

	b.Restart(t)
	require.Equal(t, addr, b.Addr)
	cl2 := kafkatestClient(t, b)
	require.NoError(t, cl2.ProduceSync(context.Background(), kafkatestRecord(b, "1", "after")).FirstErr())

	got := b.RawRecords(t, 2, 10*time.Second)
	require.Len(t, got, 2)
	require.Equal(t, "before", string(got[0].Value))
	require.Equal(t, "after", string(got[1].Value))
	require.Equal(t, got[0].Offset+1, got[1].Offset)
}

func TestPartitionForMatchesSaramaMurmur2(t *testing.T) {
	t.Parallel()
	for _, n := range []int32{1, 3, 8, 10} {
		p := sarama.NewMurmur2Partitioner("t")
		for i := range 2000 {
			key := fmt.Sprint(i)
			want, err := p.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, n)
			require.NoError(t, err)
			require.Equal(t, want, kafkatest.PartitionFor(key, n), "key %s of %d partitions", key, n)
		}
	}
}
