package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// The binary's helpers, shared with the cross-component tests of e2e/.
var (
	freeAddr   = postingtest.FreeAddr
	startServe = postingtest.StartServe
	createPost = postingtest.CreatePost
)

// proc is a running posting binary.
type proc = postingtest.Proc

func getPost(t *testing.T, addr string, id any) map[string]any {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/api/v1/posts/%v", addr, id))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var post map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&post))
	return post
}

// eventsOf returns the event types on the topic for one post, in order.
func eventsOf(records []kafkatest.Record, postID any) []string {
	var out []string
	key := fmt.Sprint(postID)
	for _, r := range records {
		if r.Key == key {
			out = append(out, r.Headers["event-type"])
		}
	}
	return out
}

// The built binary, started in embedded mode on free ports, takes a post over
// HTTP, marks it WORKING, and both of its events reach the embedded broker;
// SIGTERM exits 0 and a restart on the same data dir continues.
func TestServeEmbeddedLifecycle(t *testing.T) {
	t.Parallel()
	serveLifecycle(t, "")
}

// The same binary against MariaDB (the broker stays embedded).
func TestServeOnMySQL(t *testing.T) {
	t.Parallel()
	serveLifecycle(t, databasetest.MySQLURL(t, "serve"))
}

// And against PostgreSQL, where the relay also listens for notifications.
func TestServeOnPostgres(t *testing.T) {
	t.Parallel()
	serveLifecycle(t, databasetest.PostgresURL(t, "serve"))
}

func serveLifecycle(t *testing.T, databaseURL string) {
	dataDir := t.TempDir()
	kafkaAddr := freeAddr(t)
	env := []string{
		"POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_DATA_DIR=" + dataDir,
		"POSTING_EMBEDDED_KAFKA_ADDR=" + kafkaAddr,
		"POSTING_SCHEDULER_SPEC=@every 1s",
		"POSTING_RESERVATION_LEAD=10m",
		"POSTING_RELAY_INTERVAL=100ms",
		"POSTING_DATABASE_URL=" + databaseURL,
		"POSTING_INSTANCE_ID=serve-test",
		"POSTING_ADMIN_TOKEN=s3cret-admin-token-of-32-bytes-ok",
	}
	p := startServe(t, env...)
	post := createPost(t, p.HTTP, time.Now().Add(2*time.Minute))
	id := post["id"]
	require.Equal(t, "RESERVED", post["status"])

	require.Eventually(t, func() bool { return getPost(t, p.HTTP, id)["status"] == "WORKING" },
		30*time.Second, 100*time.Millisecond)
	records := readExactly(t, kafkaAddr, "posting-events", 2)
	require.Equal(t, []string{"POSTING_EVENT", "POSTING_RESERVATION_EVENT"}, eventsOf(records, id))

	// The embedded worker publishes a post at its time: the whole lifecycle
	// in one process.
	soonAt := time.Now().Add(4 * time.Second).Truncate(time.Second)
	soon := createPost(t, p.HTTP, soonAt)
	require.Eventually(t, func() bool { return getPost(t, p.HTTP, soon["id"])["status"] == "PUBLISHED" },
		30*time.Second, 100*time.Millisecond)
	publishedAt, err := time.Parse(time.RFC3339Nano, getPost(t, p.HTTP, soon["id"])["publishedAt"].(string))
	require.NoError(t, err)
	require.False(t, publishedAt.Before(soonAt), "published at %s, scheduled at %s", publishedAt, soonAt)
	require.Equal(t, "WORKING", getPost(t, p.HTTP, id)["status"], "the post of two minutes ahead waits")

	// The operator surface is wired: admin behind the token, metrics counting the sends.
	require.Equal(t, http.StatusUnauthorized, adminGet(t, p.HTTP, ""))
	require.Equal(t, http.StatusUnauthorized, adminGet(t, p.HTTP, "wrong"))
	require.Equal(t, http.StatusOK, adminGet(t, p.HTTP, "s3cret-admin-token-of-32-bytes-ok"))
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, p.HTTP), `posting_relay_events_sent_total{instance_id="serve-test"} 4`)
	}, 10*time.Second, 100*time.Millisecond, "metrics count the two sends of each post")
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, p.HTTP), `posting_worker_publications_total{instance_id="serve-test",outcome="published"} 1`)
	}, 10*time.Second, 100*time.Millisecond, "metrics count the publication (counted after its commit)")
	p.Terminate(t)

	// Restart on the same data dir: the post and the topic's log are still
	// there, and new work flows.
	p2 := startServe(t, env...)
	require.Equal(t, "WORKING", getPost(t, p2.HTTP, id)["status"])
	second := createPost(t, p2.HTTP, time.Now().Add(3*time.Minute))
	require.Eventually(t, func() bool { return getPost(t, p2.HTTP, second["id"])["status"] == "WORKING" },
		30*time.Second, 100*time.Millisecond)
	// Two posts before the restart and one after, two events each: a
	// missing event fails here, and so does one sent twice.
	records = readExactly(t, kafkaAddr, "posting-events", 6)
	require.Equal(t, []string{"POSTING_EVENT", "POSTING_RESERVATION_EVENT"}, eventsOf(records, id), "no event sent twice")
	require.Equal(t, []string{"POSTING_EVENT", "POSTING_RESERVATION_EVENT"}, eventsOf(records, second["id"]))
	p2.Terminate(t)
}

// A bad setting stops the program at start with a message naming it, exit 2.
func TestBadSettingExits2(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]string{
		"POSTING_RELAY_INTERVAL=fast":            `POSTING_RELAY_INTERVAL="fast"`,
		"POSTING_RELAY_BATCH_SIZE=0":             "POSTING_RELAY_BATCH_SIZE",
		"POSTING_LOG_FORMAT=xml":                 `POSTING_LOG_FORMAT="xml"`,
		"POSTING_SCHEDULER_SPEC=sometimes":       "POSTING_SCHEDULER_SPEC",
		"POSTING_DATABASE_URL=oracle://x/y":      "POSTING_DATABASE_URL",
		"POSTING_DATABASE_URL=postgres://x":      "POSTING_DATABASE_URL",
		"POSTING_DATABASE_URL=mysql://host-only": "POSTING_DATABASE_URL",
		"POSTING_PUBLISH_WEBHOOK_URL=ftp://x/y":  `POSTING_PUBLISH_WEBHOOK_URL="ftp://x/y"`,
		"POSTING_WORKER_GROUP=":                  "POSTING_WORKER_GROUP",
		"POSTING_KAFKA_COMPRESSION=brotli":       `POSTING_KAFKA_COMPRESSION="brotli"`,
		"POSTING_RABBITMQ_DECLARE_QUEUE=maybe":   "POSTING_RABBITMQ_DECLARE_QUEUE",
	} {
		out, code := runBinary(t, []string{env, "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t),
			"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}, "serve")
		require.Equal(t, 2, code, "%s: %s", env, out)
		require.Contains(t, out, want, env)
	}
	for env, want := range map[string]string{
		"POSTING_PUBLISH_WEBHOOK_URL=http://": "POSTING_PUBLISH_WEBHOOK_URL",
		"POSTING_LOG_FORMAT=xml":              "POSTING_LOG_FORMAT",
	} {
		out, code := runBinary(t, []string{env, "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_WORKER_HTTP_ADDR="}, "worker")
		require.Equal(t, 2, code, "worker %s: %s", env, out)
		require.Contains(t, out, want, env)
	}
	out, code := runBinary(t, nil, "serve", "--relay-interval", "soon")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "relay-interval")
}

// migrate applies the schema and is a no-op the second time.
func TestMigrateCommandTwice(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "m.db")
	var out, errOut bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"migrate", "--database-url", url}, &out, &errOut))
	require.Regexp(t, `applied [1-9][0-9]* migrations`, out.String())
	out.Reset()
	require.NoError(t, Run(context.Background(), []string{"migrate", "--database-url", url}, &out, &errOut))
	require.Contains(t, out.String(), "applied 0 migrations")
}

// readExactly reads the whole topic once n records are there and fails
// the test unless it holds exactly n.
func readExactly(t *testing.T, addr, topic string, n int) []kafkatest.Record {
	t.Helper()
	records := kafkatest.ReadTopic(t, addr, topic, n, 30*time.Second)
	require.Len(t, records, n, "records on topic %s", topic)
	return records
}

func adminGet(t *testing.T, addr, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/outbox/stats", nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
