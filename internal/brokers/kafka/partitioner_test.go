package kafka

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
)

// javaVector is one key and the partitions the Java client picks for it.
type javaVector struct {
	key string
	// murmur2 is Utils.murmur2(key.getBytes(UTF_8)) as Java's signed int.
	murmur2 int32
	// partitions maps a partition count to the partition
	// Utils.toPositive(Utils.murmur2(key)) % count.
	partitions map[int32]int32
}

// javaVectors were computed on 2026-12-03 with OpenJDK 17.0.15 by a 54-line
// program that transcribes, line for line, Kafka's Utils.murmur2 and
// Utils.toPositive (org.apache.kafka.common.utils.Utils of the Java client)
// and the keyed branch of BuiltInPartitioner.partitionForKey
// (toPositive(murmur2(serializedKey)) % numPartitions). The same program
// reproduces Kafka's own test vectors (UtilsTest.testMurmur2, listed in
// kafkaUtilsTestMurmur2 below), which is how its transcription was checked.
// Half the hashes are negative: there toPositive (n & 0x7fffffff) and
// Math.abs pick different partitions, which these vectors tell apart (key
// "1": toPositive gives 7 of 8, abs would give 1).
var javaVectors = []javaVector{
	{key: "1", murmur2: -1993445489, partitions: map[int32]int32{1: 0, 3: 0, 6: 3, 8: 7, 12: 3, 32: 15, 100: 59}},
	{key: "2", murmur2: 648968168, partitions: map[int32]int32{1: 0, 3: 2, 6: 2, 8: 0, 12: 8, 32: 8, 100: 68}},
	{key: "3", murmur2: -1148165505, partitions: map[int32]int32{1: 0, 3: 2, 6: 5, 8: 7, 12: 11, 32: 31, 100: 43}},
	{key: "7", murmur2: -1961297549, partitions: map[int32]int32{1: 0, 3: 0, 6: 3, 8: 3, 12: 3, 32: 19, 100: 99}},
	{key: "10", murmur2: 1164287326, partitions: map[int32]int32{1: 0, 3: 1, 6: 4, 8: 6, 12: 10, 32: 30, 100: 26}},
	{key: "42", murmur2: 417700972, partitions: map[int32]int32{1: 0, 3: 1, 6: 4, 8: 4, 12: 4, 32: 12, 100: 72}},
	{key: "99", murmur2: 450476103, partitions: map[int32]int32{1: 0, 3: 0, 6: 3, 8: 7, 12: 3, 32: 7, 100: 3}},
	{key: "100", murmur2: 627947253, partitions: map[int32]int32{1: 0, 3: 0, 6: 3, 8: 5, 12: 9, 32: 21, 100: 53}},
	{key: "1000", murmur2: 15042646, partitions: map[int32]int32{1: 0, 3: 1, 6: 4, 8: 6, 12: 10, 32: 22, 100: 46}},
	{key: "12345", murmur2: -1188365604, partitions: map[int32]int32{1: 0, 3: 2, 6: 2, 8: 4, 12: 8, 32: 28, 100: 44}},
	{key: "999999", murmur2: -79439549, partitions: map[int32]int32{1: 0, 3: 0, 6: 3, 8: 3, 12: 3, 32: 3, 100: 99}},
	{key: "2147483647", murmur2: -427214283, partitions: map[int32]int32{1: 0, 3: 2, 6: 5, 8: 5, 12: 5, 32: 21, 100: 65}},
	{key: "9223372036854775807", murmur2: -1221667907, partitions: map[int32]int32{1: 0, 3: 0, 6: 3, 8: 5, 12: 9, 32: 29, 100: 41}},
	{key: "foo", murmur2: 597841616, partitions: map[int32]int32{1: 0, 3: 2, 6: 2, 8: 0, 12: 8, 32: 16, 100: 16}},
	{key: "key", murmur2: -1079937367, partitions: map[int32]int32{1: 0, 3: 1, 6: 1, 8: 1, 12: 1, 32: 9, 100: 81}},
	{key: "ключ-post", murmur2: -99821785, partitions: map[int32]int32{1: 0, 3: 1, 6: 1, 8: 7, 12: 7, 32: 7, 100: 63}},
}

// kafkaUtilsTestMurmur2 are the vectors of Kafka's own test suite
// (UtilsTest.testMurmur2 of the Java client): key bytes and Utils.murmur2
// of them.
var kafkaUtilsTestMurmur2 = map[string]int32{
	"21":                         -973932308,
	"foobar":                     -790332482,
	"a-little-bit-long-string":   -985981536,
	"a-little-bit-longer-string": -1486304829,
	"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	"abc": 479470107,
}

// toPositive is Kafka's Utils.toPositive.
func toPositive(h int32) int32 { return h & 0x7fffffff }

func TestPartitionForMatchesJavaClient(t *testing.T) {
	t.Parallel()
	for _, v := range javaVectors {
		for n, want := range v.partitions {
			require.Equal(t, want, toPositive(v.murmur2)%n, "the vector of key %q is consistent", v.key)
			got, err := PartitionFor(v.key, n)
			require.NoError(t, err)
			require.Equal(t, want, got, "sarama: key %q of %d partitions", v.key, n)
			require.Equal(t, want, kafkatest.PartitionFor(v.key, n), "franz-go: key %q of %d partitions", v.key, n)
		}
	}
}

// With MaxInt32 partitions, the partition is toPositive(murmur2(key))
// itself (it is below MaxInt32), so the whole 31-bit hash is compared with
// Kafka's own vectors, not only its remainder.
func TestPartitionForHashMatchesKafkaUtilsTest(t *testing.T) {
	t.Parallel()
	for key, h := range kafkaUtilsTestMurmur2 {
		got, err := PartitionFor(key, math.MaxInt32)
		require.NoError(t, err)
		require.Equal(t, toPositive(h), got, "key %q", key)
	}
	for _, v := range javaVectors {
		got, err := PartitionFor(v.key, math.MaxInt32)
		require.NoError(t, err)
		require.Equal(t, toPositive(v.murmur2), got, "key %q", v.key)
	}
}

func TestPartitionForRefusesNoPartitions(t *testing.T) {
	t.Parallel()
	_, err := PartitionFor("1", 0)
	require.Error(t, err)
}

// The producer itself, not only the partitioner, puts every post's events
// on the Java client's partition: the records read back from the broker sit
// where the vectors say.
func TestProducerPartitionsLikeJavaClient(t *testing.T) {
	t.Parallel()
	const partitions = 12
	b := kafkatest.Start(t, kafkatest.WithTopic(event.DefaultTopic, partitions))
	p := producerTestNew(t, producerTestConfig(b.Addr))
	want := map[string]int32{}
	var msgs []outbox.Message
	for _, v := range javaVectors {
		post, err := strconv.ParseInt(v.key, 10, 64)
		if err != nil {
			continue // not a post id
		}
		want[v.key] = v.partitions[partitions]
		msgs = append(msgs, producerTestMessages(int64(len(msgs)+1), 1, post)...)
	}
	require.Len(t, msgs, 13)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))
	recs := b.Records(t, len(msgs), 10*time.Second)
	require.Len(t, recs, len(msgs))
	for _, r := range recs {
		require.Equal(t, want[r.Key], r.Partition, fmt.Sprintf("key %s", r.Key))
	}
}
