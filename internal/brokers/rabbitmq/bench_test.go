package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/operate/bench/relaybench"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// benchQueues are the queues a benchmark publishes to: the worker's (a
// durable quorum queue with single active consumer and its dead-letter
// queue, declared by rabbitmq.Declare as `posting worker` does), and a
// plain durable classic queue bound with "#" (another consumer's queue).
var benchQueues = []string{"worker", "classic"}

// benchQueue declares an exchange and a queue of the kind bound to it,
// deleted after b, and returns their names.
func benchQueue(b *testing.B, url, kind string) (exchange, queue string) {
	b.Helper()
	if kind == "classic" {
		exchange = rabbitmqtest.Name("posting-events")
		return exchange, rabbitmqtest.BoundQueue(b, url, exchange)
	}
	exchange, queue = workerNames(b, url)
	require.NoError(b, rabbitmq.Declare(rabbitmqtest.Channel(b, url), exchange, queue))
	return exchange, queue
}

// BenchmarkRelayToRabbitMQ moves 10,000 seeded events (2,000 posts x 5)
// from the database to the local RabbitMQ with one relay: claim, publish
// with confirms (persistent, to the worker's quorum queue or to a classic
// queue), record; pump is the relay's loop (the next batch claimed during
// the send) with the default sender (two confirm channels), pump-1ch the
// same over one channel (the sender before), sequential the poll before
// pipelining (RunOnce), side by side in one run.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 POSTING_TEST_REQUIRE_RABBITMQ=1 \
//	  go test -run '^$' -bench 'BenchmarkRelayToRabbitMQ/.*/batch=500' -benchtime 3x ./internal/brokers/rabbitmq/
func BenchmarkRelayToRabbitMQ(b *testing.B) {
	url := rabbitmqtest.URL(b)
	for _, dialect := range databasetest.Dialects {
		for _, batch := range []int{100, 500, 1000} {
			for _, kind := range benchQueues {
				for _, mode := range []string{"pump", "pump-1ch", "sequential"} {
					b.Run(fmt.Sprintf("%s/batch=%d/queue=%s/%s", dialect, batch, kind, mode), func(b *testing.B) {
						db := databasetest.New(b, dialect)
						exchange, queue := benchQueue(b, url, kind)
						ch := rabbitmqtest.Channel(b, url)
						sender := newSender(b, url, exchange)
						if mode == "pump-1ch" {
							sender = senderWith(b, url, exchange, 1) // one confirm channel, as before
						}
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
}

// BenchmarkSend is the sender alone: batches of 500 published with
// confirms to the worker's quorum queue or a classic queue, no database,
// over one confirm channel (the sender before it had several) and over
// two (the default) and four.
//
//	POSTING_TEST_REQUIRE_RABBITMQ=1 go test -run '^$' -bench BenchmarkSend -benchtime 40x ./internal/brokers/rabbitmq/
func BenchmarkSend(b *testing.B) {
	url := rabbitmqtest.URL(b)
	const batch = 500
	msgs := make([]outbox.Message, batch)
	for i := range msgs {
		msgs[i] = reservationLike(b, int64(i+1))
	}
	for _, kind := range benchQueues {
		for _, channels := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("queue=%s/channels=%d", kind, channels), func(b *testing.B) {
				exchange, queue := benchQueue(b, url, kind)
				ch := rabbitmqtest.Channel(b, url)
				s := senderWith(b, url, exchange, channels)
				var total time.Duration
				for i := 0; i < b.N; i++ {
					start := time.Now()
					for _, err := range s.Send(context.Background(), relay.Envelopes(msgs)) {
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
			})
		}
	}
}
