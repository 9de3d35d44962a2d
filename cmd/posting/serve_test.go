package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
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
	resp := sendRequest(t, http.MethodGet, "http://"+addr+"/admin/outbox/stats", token, "")
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

// readyEnv is a MariaDB database behind a proxy the test can cut, and a
// broker it can stop.
func readyEnv(t *testing.T) (*databasetest.Proxy, *kafkatest.Broker, string) {
	t.Helper()
	dbURL, proxy := databasetest.Proxied(t, databasetest.MySQLURL(t, "ready"))
	return proxy, kafkatest.Start(t), dbURL
}

// waitUnready polls GET /readyz until it answers 503 and returns the body.
var waitUnready = postingtest.WaitUnready

// serve's /readyz answers 503 naming the check that fails, from the real
// checks: a stopped broker is "kafka", an unreachable database "database".
func TestServeReadyzNamesTheFailingCheck(t *testing.T) {
	t.Parallel()
	proxy, b, dbURL := readyEnv(t)
	httpAddr := freeAddr(t)
	startBinary(t, httpAddr, []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_KAFKA_BROKERS=" + b.Addr,
		"POSTING_HTTP_ADDR=" + httpAddr, "POSTING_DATA_DIR=" + t.TempDir()}, "serve")

	b.Stop()
	body := waitUnready(t, httpAddr)
	require.Contains(t, body, `"detail":"not ready: check kafka failed"`)
	b.Restart(t)
	require.Eventually(t, func() bool { code, _ := httpGet(httpAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 100*time.Millisecond, "ready again once the broker is back")

	proxy.Cut()
	body = waitUnready(t, httpAddr)
	require.Contains(t, body, `"detail":"not ready: check database failed"`)
}

// probe is a GET's status, Content-Type and body.
type probe struct {
	code              int
	contentType, body string
}

func getProbe(t *testing.T, addr, path string) probe {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return probe{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

// posting worker serves its own /healthz, /readyz and /metrics. Its probes
// answer exactly as serve's, run beside it on the same database and broker:
// 200 JSON, and 503 problem+json naming the check that fails (they
// answered plain text).
func TestWorkerHTTPEndpoints(t *testing.T) {
	t.Parallel()
	proxy, b, dbURL := readyEnv(t)
	addr, serveAddr := freeAddr(t), freeAddr(t)
	p := startBinary(t, addr, []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_KAFKA_BROKERS=" + b.Addr,
		"POSTING_WORKER_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_INSTANCE_ID=worker-http",
		"POSTING_WORKER_CONCURRENCY=3"}, "worker")
	require.Contains(t, p.Out.String(), "concurrency=3")
	startBinary(t, serveAddr, []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_KAFKA_BROKERS=" + b.Addr,
		"POSTING_HTTP_ADDR=" + serveAddr, "POSTING_DATA_DIR=" + t.TempDir()}, "serve")
	// requireAsServe requires the worker's answer to path to be serve's,
	// status, type and body, and returns it.
	requireAsServe := func(path string) probe {
		t.Helper()
		got := getProbe(t, addr, path)
		require.Equal(t, getProbe(t, serveAddr, path), got, "worker %s answers as serve's", path)
		return got
	}

	require.Equal(t, probe{http.StatusOK, "application/json", `{"status":"ok"}` + "\n"}, requireAsServe("/healthz"))
	require.Equal(t, probe{http.StatusOK, "application/json", `{"checks":{"database":"ok","kafka":"ok"},"status":"ready"}` + "\n"},
		requireAsServe("/readyz"))
	code, body := httpGet(addr, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `posting_worker_publications_total{instance_id="worker-http",outcome="published"} 0`)
	require.Contains(t, body, "go_goroutines")

	unready := func(check string) probe {
		return probe{http.StatusServiceUnavailable, response.ProblemContentType,
			`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"not ready: check ` + check + ` failed"}` + "\n"}
	}
	b.Stop()
	waitUnready(t, addr)
	waitUnready(t, serveAddr)
	require.Equal(t, unready("kafka"), requireAsServe("/readyz"))
	b.Restart(t)
	for _, a := range []string{addr, serveAddr} {
		require.Eventually(t, func() bool { code, _ := httpGet(a, "/readyz"); return code == http.StatusOK },
			60*time.Second, 100*time.Millisecond, "ready again once the broker is back")
	}

	proxy.Cut()
	waitUnready(t, addr)
	waitUnready(t, serveAddr)
	require.Equal(t, unready("database"), requireAsServe("/readyz"))
	require.Equal(t, http.StatusOK, getProbe(t, addr, "/healthz").code, "alive while not ready")
}

// scrapeCounted scrapes until every request the test made is counted (the
// middleware counts after the handler returns, so a client may read its
// answer a moment before the count moves), or 10 s pass, and returns the
// last scrape for the caller's assertions.
func scrapeCounted(t *testing.T, addr string, counted func(m string) bool) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := scrape(t, addr)
		if counted(m) || time.Now().After(deadline) {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requestsCounted is the value of posting_http_requests_total for route and
// code in a scrape, "" when the series is absent.
func requestsCounted(scrape, route, code string) string {
	re := regexp.MustCompile(`(?m)^posting_http_requests_total\{code="` + code + `",instance_id="[^"]*",route="` +
		regexp.QuoteMeta(route) + `"\} (\S+)$`)
	if m := re.FindStringSubmatch(scrape); m != nil {
		return m[1]
	}
	return ""
}

// The handler serve runs counts every request under the pattern it matched
// (whatever the answer: 201, 401, 200), and under "unmatched" only what no
// route matches.
func TestServeCountsRequestsByMatchedRoute(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--auth-jwt-secret", cliSecret, "--admin-token", strings.Repeat("k", 32))
	out, stderr, exit := runCLI(t, "token", "--sub", "alice", "--auth-jwt-secret", cliSecret)
	require.Equal(t, 0, exit, stderr)
	do := func(method, path, token, body string) int {
		resp := sendRequest(t, method, "http://"+addr+path, token, body)
		resp.Body.Close()
		return resp.StatusCode
	}
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	require.Equal(t, 201, do("POST", "/api/v1/posts", strings.TrimSpace(out), `{"title":"t","content":"c","scheduledAt":"`+at+`"}`))
	require.Equal(t, 401, do("POST", "/api/v1/posts", "", `{}`))
	require.Equal(t, 401, do("GET", "/admin/outbox/stats", "wrong", ""))
	require.Equal(t, 200, do("GET", "/healthz", "", ""))
	require.Equal(t, 404, do("GET", "/nowhere", "", ""))

	want := []struct{ route, code string }{
		{"POST /api/v1/posts", "201"},
		{"POST /api/v1/posts", "401"},
		{"GET /admin/outbox/stats", "401"},
		{"GET /healthz", "200"},
		{"unmatched", "404"},
	}
	m := scrapeCounted(t, addr, func(m string) bool {
		return !slices.ContainsFunc(want, func(c struct{ route, code string }) bool { return requestsCounted(m, c.route, c.code) == "" })
	})
	for _, c := range want {
		require.Equal(t, "1", requestsCounted(m, c.route, c.code), "%s %s in:\n%s", c.route, c.code, m)
	}
	require.Regexp(t, `(?m)^posting_admin_auth_failures_total\{instance_id="[^"]*",outcome="invalid"\} 1$`, m)
	require.Empty(t, requestsCounted(m, "unmatched", "201"))
	require.Empty(t, requestsCounted(m, "unmatched", "401"))
}

// Every operation the served OpenAPI document names, asked of a running
// serve (without credentials, so most answer 401), is counted under its own
// route pattern: none falls to "unmatched", whatever its answer.
func TestServeCountsEveryDocumentedOperationUnderItsRoute(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--auth-jwt-secret", cliSecret, "--admin-token", strings.Repeat("k", 32))
	resp, err := http.Get("http://" + addr + "/openapi.json")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	resp.Body.Close()
	var routes []string
	for path, item := range doc.Paths {
		for method := range item {
			method = strings.ToUpper(method)
			if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, method) {
				continue // parameters, summary: not operations
			}
			routes = append(routes, method+" "+path)
			req := sendRequest(t, method, "http://"+addr+strings.ReplaceAll(path, "{id}", "1"), "", "")
			req.Body.Close()
		}
	}
	require.Greater(t, len(routes), 15, "the document names the routes of serve")
	countedRe := func(route string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^posting_http_requests_total\{code="\d+",instance_id="[^"]*",route="` +
			regexp.QuoteMeta(route) + `(\{\$\})?"\} \d+$`)
	}
	m := scrapeCounted(t, addr, func(m string) bool {
		return strings.Contains(m, `route="unmatched"`) ||
			!slices.ContainsFunc(routes, func(r string) bool { return !countedRe(r).MatchString(m) })
	})
	for _, route := range routes {
		require.Regexp(t, countedRe(route), m, "%s is not counted under its route", route)
	}
	require.NotContains(t, m, `route="unmatched"`, "a documented operation was counted as unmatched")
}

// With the default 5 s relay interval, a post created over HTTP is on the
// topic well before the next poll: the API's commit wakes the local relay
// (serve wires the relay's Wake into the writers' db). Embedded SQLite and
// MariaDB, where nothing else would wake it.
func TestServeCommitWakesRelay(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]string{"sqlite": "", "mysql": databasetest.MySQLURL(t, "wake")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kafkaAddr := freeAddr(t)
			p := postingtest.StartFreshServe(t,
				"POSTING_EMBEDDED_KAFKA_ADDR="+kafkaAddr,
				"POSTING_DATABASE_URL="+url,
				"POSTING_INSTANCE_ID=wake-test",
			)
			for i := 1; i <= 3; i++ {
				post := createPost(t, p.HTTP, time.Now().Add(time.Hour))
				// Each create follows the send of the one before, so the
				// relay's next poll by the clock is up to 5 s off.
				records := kafkatest.ReadTopic(t, kafkaAddr, "posting-events", i, 2*time.Second)
				require.Len(t, records, i, "post %v not on the topic within 2 s", post["id"])
				require.Equal(t, []string{"POSTING_EVENT"}, eventsOf(records, post["id"]))
			}
			p.Terminate(t)
		})
	}
}

// With POSTING_LOG_FORMAT=json every line serve writes is a JSON object with
// instance_id; with a non-default POSTING_KAFKA_TOPIC the events go to that
// topic and the default one is never made; with POSTING_ADMIN_TOKEN the
// admin endpoints are announced once.
func TestServeJSONLogsCustomTopicAndAdminLine(t *testing.T) {
	t.Parallel()
	kafkaAddr := freeAddr(t)
	p := postingtest.StartFreshServe(t,
		"POSTING_EMBEDDED_KAFKA_ADDR="+kafkaAddr,
		"POSTING_SCHEDULER_SPEC=@every 1s",
		"POSTING_RESERVATION_LEAD=10m",
		"POSTING_RELAY_INTERVAL=100ms",
		"POSTING_INSTANCE_ID=json-test",
		"POSTING_LOG_FORMAT=json",
		"POSTING_KAFKA_TOPIC=custom-events",
		"POSTING_ADMIN_TOKEN=s3cret-admin-token-of-32-bytes-ok",
	)
	post := createPost(t, p.HTTP, time.Now().Add(2*time.Minute))
	require.Eventually(t, func() bool { return getPost(t, p.HTTP, post["id"])["status"] == "WORKING" },
		30*time.Second, 100*time.Millisecond)
	records := readExactly(t, kafkaAddr, "custom-events", 2)
	require.Equal(t, []string{"POSTING_EVENT", "POSTING_RESERVATION_EVENT"}, eventsOf(records, post["id"]))

	probe, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{kafkaAddr}, Topic: "posting-events"}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, probe.CheckTopic(context.Background()), kafka.ErrProducerTopicMissing, "nothing went to the default topic")
	require.NoError(t, probe.Close())
	p.Terminate(t)

	lines := strings.Split(strings.TrimSpace(p.Out.String()), "\n")
	require.Greater(t, len(lines), 5)
	adminOn := 0
	for _, line := range lines {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "a JSON line: %s", line)
		require.Equal(t, "json-test", entry["instance_id"], line)
		require.NotEmpty(t, entry["msg"], line)
		if entry["msg"] == "admin endpoints on" {
			adminOn++
		}
	}
	require.Equal(t, 1, adminOn, "admin endpoints on is logged once")
}

// Against a cluster without the topic serve stops at start, naming it.
func TestServeStopsOnMissingTopic(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("something-else", 1))
	out, code := runBinary(t, []string{"POSTING_KAFKA_BROKERS=" + b.Addr, "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "posting.db"),
		"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_KAFKA_TOPIC=posting-events"}, "serve")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, `kafka topic does not exist: "posting-events"`)
	require.Contains(t, out, "POSTING_KAFKA_TOPIC=posting-events")
	require.NotContains(t, out, "http api listening")
}

// GET /asyncapi.json serves the AsyncAPI document, with the broker and
// topic the service runs with, and without the transport it does not use.
func TestServeServesAsyncAPI(t *testing.T) {
	t.Parallel()
	broker := freeAddr(t)
	p := postingtest.StartFreshServe(t, "POSTING_EMBEDDED_KAFKA_ADDR="+broker, "POSTING_KAFKA_TOPIC=custom-events")
	code, body := httpGet(p.HTTP, "/asyncapi.json")
	require.Equal(t, http.StatusOK, code, body)
	var doc struct {
		AsyncAPI string `json:"asyncapi"`
		Servers  map[string]struct {
			Host string `json:"host"`
		} `json:"servers"`
		Channels map[string]struct {
			Address string `json:"address"`
		} `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, "3.0.0", doc.AsyncAPI)
	require.Equal(t, "custom-events", doc.Channels[event.AsyncAPIChannelKafka].Address)
	require.NotContains(t, doc.Channels, event.AsyncAPIChannelRabbitMQ, "serve sends to Kafka only")
	require.Equal(t, broker, doc.Servers[event.AsyncAPIServerKafka].Host)
	require.NotContains(t, doc.Servers, event.AsyncAPIServerRabbitMQ)
	resp, err := http.Get("http://" + p.HTTP + "/asyncapi.json")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	p.Terminate(t)
}

// The embedded broker's log belongs to the database it was written for:
// serve on the same data dir with another POSTING_DATABASE_URL stops with
// exit status 2, saying whose log it is and how to go on; the first database
// still starts.
func TestServeRefusesBrokerLogOfAnotherDatabase(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	env := []string{"POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}
	startServe(t, env...).Terminate(t)

	other := filepath.Join(t.TempDir(), "other.db")
	out, code := runBinary(t, append(env, "POSTING_DATABASE_URL=sqlite://"+other), "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "belongs to database sqlite://<data dir>/posting.db, not sqlite://"+other)
	require.Contains(t, out, "Use another POSTING_DATA_DIR")
	require.Contains(t, out, "delete "+filepath.Join(dataDir, "kafka"))
	require.NotContains(t, out, "http api listening")

	startServe(t, env...).Terminate(t)
}

// The name recorded for the broker's log holds no credentials, does not
// depend on how the data dir is spelled, and gives MySQL its default port.
func TestBrokerDatabaseName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := &settings{DataDir: dir}
	for _, c := range []struct {
		db   database.DB
		want string
	}{
		{database.DB{Dialect: database.SQLite, Location: "sqlite://" + filepath.Join(dir, "posting.db")}, "sqlite://<data dir>/posting.db"},
		{database.DB{Dialect: database.SQLite, Location: "sqlite://" + filepath.Join(dir, "..", filepath.Base(dir), "x", "p.db")}, "sqlite://<data dir>/x/p.db"},
		{database.DB{Dialect: database.SQLite, Location: "sqlite:///elsewhere/p.db"}, "sqlite:///elsewhere/p.db"},
		{database.DB{Dialect: database.MySQL, Location: "mysql://db1/posting"}, "mysql://db1:3306/posting"},
		{database.DB{Dialect: database.MySQL, Location: "mysql://db1:3307/posting"}, "mysql://db1:3307/posting"},
	} {
		require.Equal(t, c.want, brokerDatabase(s, &c.db), c.db.Location)
	}
}

// With POSTING_MIGRATE=false on a fresh database serve and worker stop at
// once, naming the missing tables and the setting, and create none; on a
// migrated database serve starts.
func TestMigrateFalse(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	env := []string{"POSTING_MIGRATE=false", "POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}
	for _, cmd := range []string{"serve", "worker"} {
		out, code := runBinary(t, env, cmd)
		require.Equal(t, 1, code, "%s: %s", cmd, out)
		require.Regexp(t, `has no table posts, .*POSTING_MIGRATE=false: run `+"`posting migrate`", out, cmd)
	}
	db, err := database.Open("", dataDir)
	require.NoError(t, err)
	for _, table := range []string{"posts", "outbox", "inbox", "publications", "goose_db_version"} {
		require.False(t, db.Migrator().HasTable(table), "serve and worker created %s", table)
	}
	require.NoError(t, db.Close())

	out, code := runBinary(t, nil, "migrate", "--data-dir", dataDir)
	require.Equal(t, 0, code, out)
	p := startServe(t, env...)
	p.Terminate(t)
	require.Contains(t, p.Out.String(), "migrations skipped")
}

// A relay interval longer than the outage backoff's default cap (30 s)
// starts serve: the cap, which is no setting, follows the interval.
func TestLongRelayIntervalRaisesTheOutageBackoffCap(t *testing.T) {
	t.Parallel()
	s := settings{InstanceID: "a", RelayInterval: time.Minute, RelayBatchSize: 100, RelayMaxBatch: 1000,
		RelayMaxRetries: 3, RelayStaleAfter: 5 * time.Minute}
	c := s.relayConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, time.Minute, c.OutageBackoffMax)
}
