package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/relay/relaybench"
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
					sender := newSender(b, url, exchange)
					drain := relaybench.Relay // the relay's loop: the next batch claimed during the send
					if mode == "sequential" {
						drain = relaybench.Sequential // the poll before pipelining
					}
					const events = 10000
					var total time.Duration
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						require.NoError(b, relaybench.Seed(context.Background(), db.DB, events))
						b.StartTimer()
						res, err := drain(context.Background(), db.DB, sender, batch)
						require.NoError(b, err)
						require.Equal(b, events, res.Events, "every event sent")
						total += res.Elapsed
						b.StopTimer()
						_, err = ch.QueuePurge(queue, false)
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
