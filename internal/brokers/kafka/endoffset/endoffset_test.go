package endoffset_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postingsvc/posting/internal/brokers/kafka/endoffset"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
)

func client(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// Every partition is listed, each at the offset its next record gets: the
// records it holds, as none was deleted.
func TestListGivesEachPartitionsEndOffset(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("endoffset", 3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ends, err := endoffset.List(ctx, client(t, b.Addr), b.Topic)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 0}, ends, "an empty topic ends at 0")

	want := map[int32]int64{0: 0, 1: 0, 2: 0}
	var recs []kafkatest.Record
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "a", "a"} {
		recs = append(recs, kafkatest.Record{Key: key, Value: []byte("v")})
		want[kafkatest.PartitionFor(key, 3)]++
	}
	b.Produce(t, recs...)

	ends, err = endoffset.List(ctx, client(t, b.Addr), b.Topic)
	require.NoError(t, err)
	require.Equal(t, want, ends)
}

func TestListRefusesATopicTheClusterDoesNotHave(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("endoffset", 1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := endoffset.List(ctx, client(t, b.Addr), "no-such-topic")
	require.ErrorContains(t, err, "partitions of no-such-topic")
}
