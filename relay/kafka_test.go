package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/relay/relaybench"
)

// The relay's behaviour over a real broker is the sender suite's
// (relay/relaytest/sendertest), which kafka and rabbitmq run; here is the
// relay's throughput over the Kafka producer.

func newProducer(t testing.TB, b *kafkatest.Broker) *kafka.Producer {
	t.Helper()
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{b.Addr}, Topic: b.Topic}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// BenchmarkRelay measures one relay instance moving 10,000 seeded events from
// the database to the in-process broker, claim + send + ack, in events/s
// (relaybench.Relay: Pump back to back, as the relay's loop polls).
func BenchmarkRelay(b *testing.B) {
	for _, dialect := range databasetest.Dialects {
		for _, batch := range []int{100, 500, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", dialect, batch), func(b *testing.B) {
				db := databasetest.New(b, dialect)
				producer := newProducer(b, kafkatest.Start(b))
				const events = 10000
				var total time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					require.NoError(b, relaybench.Seed(context.Background(), db.DB, events))
					b.StartTimer()
					res, err := relaybench.Relay(context.Background(), db.DB, producer, batch)
					require.NoError(b, err)
					require.Equal(b, events, res.Events, "every event sent")
					total += res.Elapsed
				}
				b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
			})
		}
	}
}
