package kafka

import (
	"fmt"

	"github.com/IBM/sarama"
)

// The producer picks a keyed message's partition exactly as the Java client's
// default partitioner does (BuiltInPartitioner.partitionForKey, the same in
// Spring Kafka, Kafka Streams and ksqlDB):
//
//	toPositive(murmur2(keyBytes)) % numPartitions
//
// where toPositive(n) is n & 0x7fffffff, not Math.abs: the two differ for
// every negative hash, which is half of them. sarama's
// NewMurmur2Partitioner implements exactly this ((murmur2 & 0x7fffffff) %
// n, with Kafka's seed 0x9747b28c); partitioner_test.go holds vectors
// computed with Kafka's own Utils.murmur2 and checks them against it and
// against franz-go's independent implementation.
//
// sarama's default (NewHashPartitioner, FNV-1a) picks other partitions for
// the same key: a service that mixed the two would break per-key order across
// producers and co-partitioned joins downstream. Every key the service sends
// is a postId in decimal, never empty, so the random fallback sarama uses
// for a nil key is never taken.

// newPartitioner is the partitioner of every producer the service builds.
func newPartitioner(topic string) sarama.Partitioner { return sarama.NewMurmur2Partitioner(topic) }

// PartitionFor is the partition the producer picks for key on a topic of
// partitions partitions: the Java client's choice. Operators and tests use
// it to say where a post's events are.
func PartitionFor(key string, partitions int32) (int32, error) {
	if partitions <= 0 {
		return 0, fmt.Errorf("partition for key %q: %d partitions", key, partitions)
	}
	return newPartitioner("").Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, partitions)
}
