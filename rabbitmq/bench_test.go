package rabbitmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/relay/relaytest"
)

// BenchmarkRelayToRabbitMQ moves 10,000 seeded events (2,000 posts x 5)
// from the database to the local RabbitMQ with one relay: claim, publish
// with confirms (persistent, to a durable queue), record; pump is the
// relay's loop (the next batch claimed during the send), sequential the
// poll before pipelining (RunOnce), side by side in one run.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 POSTING_TEST_REQUIRE_RABBITMQ=1 \
//	  go test -run '^$' -bench BenchmarkRelayToRabbitMQ -benchtime 3x ./rabbitmq/
func BenchmarkRelayToRabbitMQ(b *testing.B) {
	url := rabbitmqtest.URL(b)
	for _, dialect := range databasetest.Dialects {
		for _, batch := range []int{100, 500, 1000} {
			for _, mode := range []string{"pump", "sequential"} {
				b.Run(fmt.Sprintf("%s/batch=%d/%s", dialect, batch, mode), func(b *testing.B) {
					db := databasetest.New(b, dialect)
					exchange := rabbitmqtest.Name("posting-events")
					queue := rabbitmqtest.BoundQueue(b, url, exchange)
					ch := rabbitmqtest.Channel(b, url)
					r, err := relay.New(outbox.NewStore(db), newSender(b, url, exchange), relay.Config{
						InstanceID: "bench", BatchSize: batch, Logger: slog.New(slog.DiscardHandler)})
					require.NoError(b, err)
					const events = 10000
					var total time.Duration
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						relaytest.Seed(b, db.DB, events/5, 5, time.Now().Add(-time.Second))
						if dialect == database.PostgreSQL {
							require.NoError(b, db.Exec("ANALYZE outbox").Error)
						}
						b.StartTimer()
						start := time.Now()
						sent := 0
						for sent < events {
							// Pump, as the relay's loop polls: the next
							// batch is claimed while this one is sent.
							poll := r.Pump
							if mode == "sequential" {
								poll = r.RunOnce // the poll before pipelining
							}
							res, err := poll(context.Background())
							require.NoError(b, err)
							sent += res.Sent
							if res.Claimed == 0 && res.Sent == 0 && res.Deferred == 0 {
								b.Fatalf("stalled at %d of %d", sent, events)
							}
						}
						total += time.Since(start)
						b.StopTimer()
						_, err := ch.QueuePurge(queue, false)
						require.NoError(b, err)
						b.StartTimer()
					}
					b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
				})
			}
		}
	}
}

// BenchmarkSend is the sender alone: batches of 500 published with
// confirms to a durable queue, no database.
//
//	go test -run '^$' -bench BenchmarkSend -benchtime 20x ./rabbitmq/
func BenchmarkSend(b *testing.B) {
	url := rabbitmqtest.URL(b)
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.BoundQueue(b, url, exchange)
	ch := rabbitmqtest.Channel(b, url)
	s := newSender(b, url, exchange)
	const batch = 500
	msgs := make([]outbox.Message, batch)
	for i := range msgs {
		msgs[i] = reservationLike(b, int64(i+1))
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for _, err := range s.Send(context.Background(), msgs) {
			require.NoError(b, err)
		}
		total += time.Since(start)
		if i%20 == 19 {
			b.StopTimer()
			_, err := ch.QueuePurge(queue, false)
			require.NoError(b, err)
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(batch*b.N)/total.Seconds(), "msgs/s")
}
