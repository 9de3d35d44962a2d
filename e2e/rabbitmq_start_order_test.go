package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/relay/relaytest"
	"github.com/postingsvc/posting/reservation"
)

// Started in the README's order on a fresh broker, serve before any worker
// ever ran: serve declares and binds the worker group's queue itself, so
// the events it sends meanwhile wait there instead of coming back
// unroutable and ending FAIL. The worker, started once serve has sent
// everything, publishes every post.
func TestServeBeforeTheFirstWorkerOnAFreshBrokerLosesNothing(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.FreshVhost(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "startorder")
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	env := []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_RABBITMQ_URL=" + url,
		"POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RESERVATION_LEAD=3s", "POSTING_RELAY_INTERVAL=100ms",
		"POSTING_RELAY_MAX_RETRIES=1"}
	addr := postingtest.FreeAddr(t)
	postingtest.StartServe(t, append([]string{"POSTING_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir()}, env...)...)

	const posts = 5
	for range posts {
		postingtest.CreatePost(t, addr, time.Now().Add(5*time.Second))
	}
	db, err := database.Open(dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	// Every event (CREATED and the reservation of each post) has had its
	// outcome before any worker runs: sent, or (unroutable) failed for good.
	require.Eventually(t, func() bool {
		c := relaytest.CountByStatus(t, db.DB)
		return c[outbox.StatusSent]+c[outbox.StatusFail] == 2*posts
	}, time.Minute, 100*time.Millisecond)
	require.Zero(t, relaytest.CountByStatus(t, db.DB)[outbox.StatusFail], "events sent before the first worker ended FAIL")

	workerAddr := postingtest.FreeAddr(t)
	postingtest.StartBinary(t, workerAddr, append([]string{"POSTING_WORKER_HTTP_ADDR=" + workerAddr, "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_PUBLISH_WEBHOOK_URL=" + hook.URL}, env...), "worker")
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("status = ?", reservation.StatusPublished).Count(&n).Error)
		return n == posts
	}, time.Minute, 100*time.Millisecond, "not every post was published")
}
