package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/reservation"
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

// End to end on PostgreSQL + RabbitMQ: two serve instances and a worker;
// one serve is killed with SIGKILL after taking its share of the posts.
// Every post ends PUBLISHED, published once (one webhook call), none early.
func TestEndToEndOnPostgresAndRabbitMQ(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "e2erabbit")
	exchange, group := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, url, exchange, group, group+".dead")

	var (
		mu   sync.Mutex
		hook = map[int64]int{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p api.PostJSON
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		hook[p.ID]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	env := []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_RABBITMQ_URL=" + url, "POSTING_RABBITMQ_EXCHANGE=" + exchange,
		"POSTING_WORKER_GROUP=" + group, "POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s",
		"POSTING_RELAY_INTERVAL=100ms"}
	var serves []*proc
	for i := range 2 {
		addr := freeAddr(t)
		serves = append(serves, startServe(t, append([]string{"POSTING_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir(),
			fmt.Sprintf("POSTING_INSTANCE_ID=e2e-serve-%d", i)}, env...)...))
	}
	workerAddr := freeAddr(t)
	startBinary(t, workerAddr, append([]string{"POSTING_WORKER_HTTP_ADDR=" + workerAddr, "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_INSTANCE_ID=e2e-worker", "POSTING_PUBLISH_WEBHOOK_URL=" + srv.URL}, env...), "worker")

	const posts = 60
	start := time.Now().Truncate(time.Second)
	due := map[int64]time.Time{}
	for i := range posts {
		at := start.Add(6*time.Second + time.Duration(i)*20*time.Second/posts).Truncate(time.Second)
		p := createPost(t, serves[i%2].http, at)
		due[int64(p["id"].(float64))] = at
	}
	// Kill one serve while its scheduler and relay are busy.
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	require.NoError(t, serves[0].cmd.Process.Kill())
	<-serves[0].done

	// A claim held by the killed relay waits out the stale limit (2 min).
	db := waitPublished(t, dbURL, posts, 4*time.Minute)

	var all []reservation.Post
	require.NoError(t, db.DB.Find(&all).Error)
	require.Len(t, all, posts)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range all {
		require.Equal(t, 1, hook[p.ID], "post %d: webhook calls", p.ID)
		require.NotNil(t, p.PublishedAt)
		require.False(t, p.PublishedAt.Before(due[p.ID]), "post %d published early", p.ID)
	}
	code, body := httpGet(workerAddr, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
}
