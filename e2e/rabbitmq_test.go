package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/reservation"
)

// End to end on PostgreSQL + RabbitMQ: two serve instances and a worker;
// one serve is killed with SIGKILL after taking its share of the posts.
// Every post ends PUBLISHED, published once (one webhook call), none early.
func TestEndToEndOnPostgresAndRabbitMQ(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "e2erabbit")
	exchange, group := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, url, exchange, group, group+".dead")

	srv, hookCalls := countingWebhook(t)

	env := []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_RABBITMQ_URL=" + url, "POSTING_RABBITMQ_EXCHANGE=" + exchange,
		"POSTING_WORKER_GROUP=" + group, "POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s",
		"POSTING_RELAY_INTERVAL=100ms"}
	var serves []*postingtest.Proc
	for i := range 2 {
		addr := postingtest.FreeAddr(t)
		serves = append(serves, postingtest.StartServe(t, append([]string{"POSTING_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir(),
			fmt.Sprintf("POSTING_INSTANCE_ID=e2e-serve-%d", i)}, env...)...))
	}
	workerAddr := postingtest.FreeAddr(t)
	postingtest.StartBinary(t, workerAddr, append([]string{"POSTING_WORKER_HTTP_ADDR=" + workerAddr, "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_INSTANCE_ID=e2e-worker", "POSTING_PUBLISH_WEBHOOK_URL=" + srv.URL}, env...), "worker")

	const posts = 60
	start := time.Now().Truncate(time.Second)
	due := map[int64]time.Time{}
	for i := range posts {
		at := start.Add(6*time.Second + time.Duration(i)*20*time.Second/posts).Truncate(time.Second)
		p := postingtest.CreatePost(t, serves[i%2].HTTP, at)
		due[int64(p["id"].(float64))] = at
	}
	// Kill one serve while its scheduler and relay are busy.
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	require.NoError(t, serves[0].Cmd.Process.Kill())
	<-serves[0].Done

	// A claim held by the killed relay waits out the stale limit (2 min).
	db := waitPublished(t, dbURL, posts, 4*time.Minute)

	var all []reservation.Post
	require.NoError(t, db.DB.Find(&all).Error)
	require.Len(t, all, posts)
	hook := hookCalls()
	for _, p := range all {
		require.Equal(t, 1, hook[p.ID], "post %d: webhook calls", p.ID)
		require.NotNil(t, p.PublishedAt)
		require.False(t, p.PublishedAt.Before(due[p.ID]), "post %d published early", p.ID)
	}
	code, body := postingtest.HTTPGet(workerAddr, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
}
