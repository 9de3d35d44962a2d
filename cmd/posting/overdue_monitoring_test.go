package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// promAlert is an alert as Prometheus's /api/v1/alerts answers it.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// promAlertNamed returns the alert name of Prometheus at base, if it is
// pending or firing.
func promAlertNamed(t *testing.T, base, name string) (promAlert, bool) {
	t.Helper()
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/alerts", nil), &d))
	for _, a := range d.Alerts {
		if a.Labels["alertname"] == name {
			return a, true
		}
	}
	return promAlert{}, false
}

// A post falls due while the only worker is stopped: serve (PostgreSQL, a
// Kafka broker, POSTING_OVERDUE_AFTER 3s) lists it overdue as
// no_publication, and a real Prometheus scraping serve with the shipped
// rules fires PostingPostsOverdue with the count and the oldest age. Once
// the worker is back, the post is published (once, whatever the
// re-announcements) and the alert resolves.
func TestPostingPostsOverdueFiresBehindAStoppedWorkerAndResolves(t *testing.T) {
	t.Parallel()
	prometheus, _ := requirePrometheus(t)
	dbURL := databasetest.URL(t, database.PostgreSQL, "overduealert")
	b := kafkatest.Start(t)
	logs := &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve and worker output:\n%s", logs.String())
		}
	})
	const adminToken = "overdue-alert-test-admin-token-32b"
	common := []string{"--database-url", dbURL, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir()}
	serveAddr := freeAddr(t)
	runInProcess(t, logs, append([]string{"serve", "--http-addr", serveAddr, "--instance-id", "overdue-serve",
		"--admin-token", adminToken, "--relay-interval", "100ms", "--scheduler-spec", "@every 1s",
		"--overdue-after", "3s", "--overdue-interval", "500ms"}, common...)...)
	require.Eventually(t, func() bool { code, _ := httpGet(serveAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "serve never became ready")

	// The worker runs once, so that its consumer group exists, then stops.
	startWorker := func() (stop func()) {
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, append([]string{"worker", "--instance-id", "overdue-worker", "--worker-http-addr", addr}, common...), logs, logs)
		}()
		var once sync.Once
		stop = func() {
			once.Do(func() {
				cancel()
				select {
				case err := <-done:
					require.NoError(t, err, "posting worker")
				case <-time.After(60 * time.Second):
					t.Error("posting worker did not stop")
				}
			})
		}
		t.Cleanup(stop)
		require.Eventually(t, func() bool { code, _ := httpGet(addr, "/readyz"); return code == http.StatusOK },
			60*time.Second, 50*time.Millisecond, "worker never became ready")
		return stop
	}
	startWorker()()

	base := startPrometheus(t, prometheus, map[string]string{"posting": serveAddr})
	// Scraped and evaluated with nothing overdue: quiet.
	require.Eventually(t, func() bool {
		var r struct {
			Result []json.RawMessage `json:"result"`
		}
		require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/query",
			url.Values{"query": {`max(posting_posts_overdue) == 0`}}), &r))
		return len(r.Result) == 1
	}, 30*time.Second, 200*time.Millisecond, "posting_posts_overdue never scraped at 0")
	_, found := promAlertNamed(t, base, "PostingPostsOverdue")
	require.False(t, found, "PostingPostsOverdue with nothing overdue")

	post := createPost(t, serveAddr, time.Now().Add(2*time.Second))
	id := int64(post["id"].(float64))

	// serve lists it as sent but never made a publication.
	var listed overdue.PostJSON
	require.Eventually(t, func() bool {
		resp := sendRequest(t, "GET", "http://"+serveAddr+"/admin/posts/overdue", adminToken, "")
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
		var l overdue.ListJSON
		require.NoError(t, json.Unmarshal(raw, &l))
		if len(l.Items) != 1 {
			return false
		}
		listed = l.Items[0]
		return listed.Reason == overdue.ReasonNoPublication
	}, 60*time.Second, 200*time.Millisecond, "the post never listed overdue as no_publication: %+v", listed)
	require.Equal(t, id, listed.PostID)
	require.Equal(t, "WORKING", string(listed.Status))

	// Pending, then firing after the rule's for: with the count and the age.
	var fired promAlert
	require.Eventually(t, func() bool {
		a, ok := promAlertNamed(t, base, "PostingPostsOverdue")
		fired = a
		return ok && a.State == "firing"
	}, 150*time.Second, 500*time.Millisecond, "PostingPostsOverdue never fired; last seen %+v", fired)
	require.Equal(t, "critical", fired.Labels["severity"])
	v, err := strconv.ParseFloat(fired.Value, 64)
	require.NoError(t, err, fired.Value)
	require.Equal(t, 1.0, v, "one post overdue")
	require.Regexp(t, `^Overdue posts: 1, the oldest (\d+m )?\d+s past its scheduledAt$`, fired.Annotations["summary"])
	require.Regexp(t, regexp.QuoteMeta("docs/operations.md#postingpostsoverdue")+"$", fired.Annotations["runbook_url"])

	// The worker returns: the post is published, once, and the alert goes.
	startWorker()
	require.Eventually(t, func() bool {
		return getPost(t, serveAddr, id)["status"] == "PUBLISHED"
	}, 60*time.Second, 200*time.Millisecond, "the post was never published once the worker was back")
	require.Eventually(t, func() bool {
		_, ok := promAlertNamed(t, base, "PostingPostsOverdue")
		return !ok
	}, 60*time.Second, 500*time.Millisecond, "PostingPostsOverdue did not resolve once the post was published")

	db := databasetest.Open(t, dbURL)
	var pubs []worker.Publication
	require.NoError(t, db.Where("post_id = ?", id).Find(&pubs).Error)
	require.Len(t, pubs, 1)
	require.Equal(t, worker.PublicationPublished, pubs[0].Status)
}
