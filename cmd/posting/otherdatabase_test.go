package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// adminJSON GETs path from serve at addr with the admin token and decodes
// the 200 answer into v.
func adminJSON(t *testing.T, addr, token, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, v), string(body))
}

// The getting-started setup (PostgreSQL and RabbitMQ) with its only worker
// started on another database (an explicit sqlite:// file, which start-up
// allows): that worker takes the post's events off the queue, and its
// database knows no such post. The post is not lost in silence: past the
// grace serve lists it overdue as no_publication and its gauge says so,
// and it announces the reservation again. Once a worker runs on the right
// database, the next announcement is published, once, and the wrong
// database holds no publication of it.
func TestAWorkerOnAnotherDatabaseLeavesThePostOverdueUntilARightOneRuns(t *testing.T) {
	t.Parallel()
	amqpURL := rabbitmqtest.URL(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "otherdb")
	exchange, group := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, amqpURL, exchange, group)
	const token = "other-database-test-admin-token-32b"
	addr := freeAddr(t)
	broker := []string{"POSTING_RABBITMQ_URL=" + amqpURL, "POSTING_RABBITMQ_EXCHANGE=" + exchange, "POSTING_WORKER_GROUP=" + group}
	startServe(t, append([]string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_ADMIN_TOKEN=" + token, "POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RELAY_INTERVAL=100ms",
		"POSTING_OVERDUE_AFTER=4s", "POSTING_OVERDUE_INTERVAL=250ms", "POSTING_OVERDUE_REANNOUNCE=5"}, broker...)...)

	otherFile := filepath.Join(t.TempDir(), "other.db")
	wrong := postingtest.StartFreshWorker(t, append([]string{"POSTING_DATABASE_URL=sqlite://" + otherFile}, broker...)...)

	post := createPost(t, addr, time.Now().Add(2*time.Second))
	id := int64(post["id"].(float64))
	type listed struct {
		Count int `json:"count"`
		Items []struct {
			PostID      int64  `json:"postId"`
			Reason      string `json:"reason"`
			Reannounced int    `json:"reannounced"`
		} `json:"items"`
	}
	var l listed
	require.Eventually(t, func() bool {
		adminJSON(t, addr, token, "/admin/posts/overdue", &l)
		return l.Count == 1 && l.Items[0].PostID == id && l.Items[0].Reason == "no_publication" && l.Items[0].Reannounced >= 1
	}, 90*time.Second, 100*time.Millisecond, "the post is listed overdue and announced again: %+v", l)
	code, metrics := httpGet(addr, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `(?m)^posting_posts_overdue\{instance_id="[^"]+"\} 1$`, metrics, "the gauge the alert reads")

	wrong.Terminate(t)
	other := databasetest.Open(t, "sqlite://"+otherFile)
	var pubs int64
	require.NoError(t, other.Model(&worker.Publication{}).Count(&pubs).Error)
	require.Zero(t, pubs, "the other database made no publication of a post it does not hold")
	requireRefusalsCounted(t, wrong)

	right := postingtest.StartFreshWorker(t, append([]string{"POSTING_DATABASE_URL=" + dbURL}, broker...)...)
	db := databasetest.Open(t, dbURL)
	require.Eventually(t, func() bool {
		return databasetest.Load[reservation.Post](t, db.DB, id).Status == reservation.StatusPublished
	}, 90*time.Second, 100*time.Millisecond, "published by a worker on the right database")
	require.NoError(t, db.Model(&worker.Publication{}).Where("post_id = ? AND status = ?", id, worker.PublicationPublished).Count(&pubs).Error)
	require.EqualValues(t, 1, pubs)
	require.Eventually(t, func() bool {
		adminJSON(t, addr, token, "/admin/posts/overdue", &l)
		return l.Count == 0
	}, 30*time.Second, 100*time.Millisecond)
	right.Terminate(t)
}

// requireRefusalsCounted finds, in a stopped worker's output, that it
// refused the events its database does not hold (the worker logs a refusal
// once per post).
func requireRefusalsCounted(t *testing.T, p *proc) {
	t.Helper()
	out := p.Out.String()
	require.True(t, strings.Contains(out, "refused") && strings.Contains(out, "unknown_post"),
		"the worker on the other database says it refused the post's events:\n%s", out)
}
