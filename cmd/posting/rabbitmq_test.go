package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
)

// Both brokers at once is a start-up error naming both settings.
func TestServeRefusesBothBrokers(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672/",
		"POSTING_KAFKA_BROKERS=127.0.0.1:9092", "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t)}, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "POSTING_RABBITMQ_URL")
	require.Contains(t, out, "POSTING_KAFKA_BROKERS")

	out, code = runBinary(t, []string{"POSTING_RABBITMQ_URL=http://127.0.0.1:5672/",
		"POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t)}, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `invalid POSTING_RABBITMQ_URL="http://127.0.0.1:5672/"`)
}

// serve on PostgreSQL with POSTING_RABBITMQ_URL declares the exchange and
// sends a post's events to it; /readyz names rabbitmq when it is cut off.
func TestServeSendsToRabbitMQ(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "serverabbit")
	exchange := rabbitmqtest.Name("posting-events")
	queue := rabbitmqtest.BoundQueue(t, url, exchange)
	proxy := rabbitmqtest.StartProxy(t, url)
	addr := freeAddr(t)
	startServe(t, "POSTING_DATABASE_URL="+dbURL, "POSTING_RABBITMQ_URL="+proxy.URL, "POSTING_RABBITMQ_EXCHANGE="+exchange,
		"POSTING_HTTP_ADDR="+addr, "POSTING_DATA_DIR="+t.TempDir(), "POSTING_SCHEDULER_SPEC=@every 1s",
		"POSTING_RELAY_INTERVAL=100ms", "POSTING_RABBITMQ_DECLARE_QUEUE=false")

	post := createPost(t, addr, time.Now().Add(2*time.Minute))
	ds := rabbitmqtest.Read(t, url, queue, 2, time.Minute)
	require.Len(t, ds, 2, "CREATED and the reservation")
	key := fmt.Sprint(post["id"])
	for i, typ := range []event.Type{event.PostingEvent, event.ReservationEvent} {
		require.Equal(t, key, ds[i].RoutingKey)
		require.Equal(t, string(typ), ds[i].Type)
		require.Equal(t, string(typ), ds[i].Headers[event.HeaderEventType])
		require.Equal(t, ds[i].MessageId, ds[i].Headers[event.HeaderEventID])
	}

	proxy.Cut()
	body := waitUnready(t, addr)
	require.Contains(t, body, `"detail":"not ready: check rabbitmq failed"`)
}

// Both brokers at once stops the worker too, naming both.
func TestWorkerRefusesBothBrokers(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672/",
		"POSTING_KAFKA_BROKERS=127.0.0.1:9092", "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_WORKER_HTTP_ADDR="}, "worker")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "POSTING_RABBITMQ_URL")
	require.Contains(t, out, "POSTING_KAFKA_BROKERS")
}
