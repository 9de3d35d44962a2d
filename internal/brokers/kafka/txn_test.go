package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/publish/inbox/inboxtest"
)

// The consumers the manual names read committed records by default: a
// transaction the producer aborted (a send the relay gave up on) is read
// neither by the worker's consumer nor by kcat (librdkafka), while the
// committed one after it on the same partition is.
func TestConsumersSkipAnAbortedTransaction(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.DefaultProduceTopic(b.Topic), kgo.TransactionalID("aborting"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx := context.Background()
	record := func(n int) *kgo.Record {
		m := inboxtest.WellFormed(n, 1)
		r := &kgo.Record{Key: []byte(m.Key), Value: m.Value}
		for k, v := range m.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		return r
	}
	for _, tx := range []struct {
		n   int
		end kgo.TransactionEndTry
	}{{1, kgo.TryAbort}, {2, kgo.TryCommit}} {
		require.NoError(t, cl.BeginTransaction())
		require.NoError(t, cl.ProduceSync(ctx, record(tx.n)).FirstErr())
		require.NoError(t, cl.EndTransaction(ctx, tx.end))
	}
	aborted, committed := inboxtest.WellFormed(1, 1).Headers[event.HeaderEventID], inboxtest.WellFormed(2, 1).Headers[event.HeaderEventID]

	h := &consumerTestHandler{}
	consumerTestStart(t, b.Addr, "read-committed", h, nil)
	require.Eventually(t, func() bool { return len(h.snapshot()) > 0 }, 20*time.Second, 20*time.Millisecond)
	events := h.snapshot()
	require.Equal(t, committed, events[0].EventID, "the aborted record, earlier on the partition, was not handed over")

	recs, ran := compressionTestKcat(t, b.Addr, b.Topic)
	if ran {
		require.Len(t, recs, 1, "kcat reads the committed record only")
		require.Contains(t, recs[0].Headers, committed)
		require.NotContains(t, recs[0].Headers, aborted)
	}
}
