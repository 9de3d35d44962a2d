package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/platform/nodetest"
)

// The tests here read what a running serve serves and sends with tools and
// clients nobody here wrote, pinned in package.json (scripts in thirdparty/):
// they fail instead of skipping under POSTING_TEST_REQUIRE_NODE=1, as in CI.

// thirdPartyServe starts serve, embedded, on free ports, and returns it
// with its broker's address; env adds settings.
func thirdPartyServe(t *testing.T, env ...string) (p *proc, broker string) {
	t.Helper()
	nodetest.Require(t)
	broker = freeAddr(t)
	return postingtest.StartFreshServe(t, append([]string{"POSTING_EMBEDDED_KAFKA_ADDR=" + broker}, env...)...), broker
}

// thirdPartyRequest sends a JSON request to serve and requires want.
func thirdPartyRequest(t *testing.T, method, url, body string, want int) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, url, raw)
}

// thirdPartyPosts makes, through serve's API, n posts an hour ahead that are
// created, updated and cancelled, and one two minutes ahead that the
// scheduler reserves, and returns each post's key with the events it
// yields, in order, and how many events that makes.
func thirdPartyPosts(t *testing.T, addr string, n int) (want map[string][]string, count int) {
	t.Helper()
	want = map[string][]string{}
	for range n {
		key := fmt.Sprint(createPost(t, addr, time.Now().Add(time.Hour))["id"])
		base := "http://" + addr + "/api/v1/posts/" + key
		thirdPartyRequest(t, "PATCH", base, `{"title":"changed"}`, http.StatusOK)
		thirdPartyRequest(t, "POST", base+"/cancel", "", http.StatusOK)
		want[key] = []string{"POSTING_EVENT/CREATED", "POSTING_EVENT/UPDATED", "POSTING_EVENT/CANCELLED"}
	}
	due := fmt.Sprint(createPost(t, addr, time.Now().Add(2*time.Minute))["id"])
	want[due] = []string{"POSTING_EVENT/CREATED", "POSTING_RESERVATION_EVENT/"}
	return want, 3*n + 2
}

// thirdPartyOrder groups the JSON lines a reading script printed by key,
// in the order read, and fails on anything that is not such a line.
func thirdPartyOrder(t *testing.T, stdout string) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var m struct{ Key, EventType, Action string }
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q", line)
		got[m.Key] = append(got[m.Key], m.EventType+"/"+m.Action)
	}
	return got
}

// TestRedoclyLintsServedOpenAPI lints the /openapi.json a running serve
// answers with @redocly/cli and the repository's redocly.yaml (the
// recommended rules): no error and no warning.
func TestRedoclyLintsServedOpenAPI(t *testing.T) {
	t.Parallel()
	p, _ := thirdPartyServe(t)
	code, body := httpGet(p.HTTP, "/openapi.json")
	require.Equal(t, http.StatusOK, code, body)
	file := filepath.Join(t.TempDir(), "openapi.json")
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	res := nodetest.Run(t, 2*time.Minute, nil, "node_modules/@redocly/cli/bin/cli.js", "lint",
		"--config", "redocly.yaml", "--format", "json", file)
	var report struct {
		Totals struct{ Errors, Warnings, Ignored int } `json:"totals"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &report), "stdout %s\nstderr %s", res.Stdout, res.Stderr)
	require.Zero(t, report.Totals.Errors, res.Stdout)
	require.Zero(t, report.Totals.Warnings, res.Stdout)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
}

// TestAsyncAPIParserValidatesServedDocument validates the /asyncapi.json a
// running serve answers with @asyncapi/parser: no error. Its embedded
// worker calls a webhook, which the document describes at the URL's host,
// without the URL's credentials, path or query: Slack, Discord and Teams
// keep the webhook's credential in its path.
func TestAsyncAPIParserValidatesServedDocument(t *testing.T) {
	t.Parallel()
	p, broker := thirdPartyServe(t, "POSTING_PUBLISH_WEBHOOK_URL=https://hook:s3cret-pw@hooks.example:8443/services/T0ZZ/B0ZZ/hushhush42?token=abc")
	code, body := httpGet(p.HTTP, "/asyncapi.json")
	require.Equal(t, http.StatusOK, code, body)
	var doc struct {
		Servers  map[string]struct{ Host, Protocol string } `json:"servers"`
		Channels map[string]struct{ Address string }        `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, map[string]struct{ Host, Protocol string }{
		event.AsyncAPIServerKafka:   {Host: broker, Protocol: "kafka"},
		event.AsyncAPIServerWebhook: {Host: "hooks.example:8443", Protocol: "https"},
	}, doc.Servers)
	require.Empty(t, doc.Channels[event.AsyncAPIChannelWebhook].Address, "address null: the path is not told")
	require.NotContains(t, body, "hushhush42")
	require.NotContains(t, body, "/services/")
	require.NotContains(t, body, "s3cret-pw")
	require.NotContains(t, body, "token=abc")
	res := nodetest.Run(t, 2*time.Minute, nil, "thirdparty/asyncapi-validate.js", "http://"+p.HTTP+"/asyncapi.json")
	require.Equal(t, 0, res.ExitCode, "stdout %s\nstderr %s", res.Stdout, res.Stderr)
	require.Contains(t, res.Stderr, "0 errors")
}

// TestKafkaJSReadsServeDefaults reads the topic of a running serve, with
// its default settings, with stock kafkajs: every message is read, keys,
// headers and values keep the served AsyncAPI document (ajv), each is a
// valid CloudEvent for the CloudEvents SDK's Kafka binding, and each post's
// events come in the order they happened.
func TestKafkaJSReadsServeDefaults(t *testing.T) {
	t.Parallel()
	p, broker := thirdPartyServe(t, "POSTING_SCHEDULER_SPEC=@every 1s")
	want, count := thirdPartyPosts(t, p.HTTP, 5)
	res := nodetest.Run(t, 3*time.Minute, []string{"BROKERS=" + broker, "TOPIC=" + event.DefaultTopic,
		"ASYNCAPI_URL=http://" + p.HTTP + "/asyncapi.json", fmt.Sprintf("COUNT=%d", count), "TIMEOUT_MS=120000"},
		"thirdparty/kafkajs.js")
	require.Equal(t, 0, res.ExitCode, "stdout %s\nstderr %s", res.Stdout, res.Stderr)
	require.Equal(t, want, thirdPartyOrder(t, res.Stdout))
}

// TestAmqplibReadsServeExchange reads, with amqplib, what a running serve
// publishes to its RabbitMQ exchange: routing keys, headers (cloudEvents_*
// included), values and AMQP properties keep the served AsyncAPI document,
// in each post's order; that document names the RabbitMQ server serve runs
// with, and @asyncapi/parser finds no error in it.
func TestAmqplibReadsServeExchange(t *testing.T) {
	t.Parallel()
	url, exchange, queue := rabbitmqtest.BoundExchange(t)
	// An external broker needs an explicit database (a SQLite file here).
	p, _ := thirdPartyServe(t, "POSTING_RABBITMQ_URL="+url, "POSTING_RABBITMQ_EXCHANGE="+exchange,
		"POSTING_DATABASE_URL=sqlite://"+filepath.Join(t.TempDir(), "posting.db"), "POSTING_SCHEDULER_SPEC=@every 1s")
	docURL := "http://" + p.HTTP + "/asyncapi.json"
	code, body := httpGet(p.HTTP, "/asyncapi.json")
	require.Equal(t, http.StatusOK, code, body)
	var doc struct {
		Servers map[string]struct{ Host string } `json:"servers"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, map[string]struct{ Host string }{event.AsyncAPIServerRabbitMQ: {Host: "127.0.0.1:5672"}}, doc.Servers)
	require.NotContains(t, body, "guest:", "the URL's credentials stay out of the document")
	res := nodetest.Run(t, 2*time.Minute, nil, "thirdparty/asyncapi-validate.js", docURL)
	require.Equal(t, 0, res.ExitCode, "stdout %s\nstderr %s", res.Stdout, res.Stderr)

	want, count := thirdPartyPosts(t, p.HTTP, 3)
	res = nodetest.Run(t, 3*time.Minute, []string{"AMQP_URL=" + url, "QUEUE=" + queue, "ASYNCAPI_URL=" + docURL,
		fmt.Sprintf("COUNT=%d", count), "TIMEOUT_MS=120000"}, "thirdparty/amqplib.js")
	require.Equal(t, 0, res.ExitCode, "stdout %s\nstderr %s", res.Stdout, res.Stderr)
	require.Equal(t, want, thirdPartyOrder(t, res.Stdout))
}

// TestKafkaJSReadsTheCodecsTheManualSays runs serve with each opt-in
// codec and reads its topic with stock kafkajs, as the manual's table of
// clients says it goes: gzip is read (every message keeps the served
// AsyncAPI document), snappy, lz4 and zstd stop kafkajs at the first batch
// with KafkaJSNotImplemented, which is why none is the default.
func TestKafkaJSReadsTheCodecsTheManualSays(t *testing.T) {
	t.Parallel()
	for codec, refusal := range map[string]string{
		"gzip":   "",
		"snappy": "Snappy compression not implemented",
		"lz4":    "LZ4 compression not implemented",
		"zstd":   "ZSTD compression not implemented",
	} {
		t.Run(codec, func(t *testing.T) {
			t.Parallel()
			p, broker := thirdPartyServe(t, "POSTING_KAFKA_COMPRESSION="+codec)
			key := fmt.Sprint(createPost(t, p.HTTP, time.Now().Add(time.Hour))["id"])
			res := nodetest.Run(t, 3*time.Minute, []string{"BROKERS=" + broker, "TOPIC=" + event.DefaultTopic,
				"ASYNCAPI_URL=http://" + p.HTTP + "/asyncapi.json", "COUNT=1", "TIMEOUT_MS=120000"},
				"thirdparty/kafkajs.js")
			if refusal == "" {
				require.Equal(t, 0, res.ExitCode, "stdout %s\nstderr %s", res.Stdout, res.Stderr)
				require.Equal(t, map[string][]string{key: {"POSTING_EVENT/CREATED"}}, thirdPartyOrder(t, res.Stdout))
				return
			}
			require.Equal(t, 3, res.ExitCode, "kafkajs fails, stdout %s\nstderr %s", res.Stdout, res.Stderr)
			require.Contains(t, res.Stderr, "KafkaJSNotImplemented: "+refusal)
			require.Empty(t, strings.TrimSpace(res.Stdout), "no message read")
		})
	}
}
