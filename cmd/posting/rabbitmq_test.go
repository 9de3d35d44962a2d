package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
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

// serve names RabbitMQ's own refusal at start and stops at once: a wrong
// password or a missing vhost is the broker's answer, which retrying does
// not change (before, serve said only "rabbitmq did not answer within 2s"
// after 16 s, or nothing at all).
func TestServeNamesRabbitMQsRefusal(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	for name, c := range map[string]struct{ url, says string }{
		"wrong password": {strings.Replace(url, "guest:guest@", "guest:not-the-password@", 1), "username or password not allowed (403)"},
		"missing vhost":  {strings.TrimSuffix(url, "/") + "/no-such-vhost", "vhost no-such-vhost not found (530)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, code := runBinary(t, []string{"POSTING_RABBITMQ_URL=" + c.url, "POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"),
				"POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_RABBITMQ_EXCHANGE=" + rabbitmqtest.Name("x")}, "serve")
			require.NotEqual(t, 0, code, out)
			require.Contains(t, out, "rabbitmq refused the connection")
			require.Contains(t, out, c.says)
			require.NotContains(t, out, "not-the-password")
		})
	}
}
