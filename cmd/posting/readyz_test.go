package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

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

// posting worker serves its own /healthz, /readyz and /metrics; its /readyz
// answers 503 naming the check that fails.
func TestWorkerHTTPEndpoints(t *testing.T) {
	t.Parallel()
	proxy, b, dbURL := readyEnv(t)
	addr := freeAddr(t)
	p := startBinary(t, addr, []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_KAFKA_BROKERS=" + b.Addr,
		"POSTING_WORKER_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_INSTANCE_ID=worker-http",
		"POSTING_WORKER_CONCURRENCY=3"}, "worker")
	require.Contains(t, p.Out.String(), "concurrency=3")

	code, body := httpGet(addr, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	code, body = httpGet(addr, "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)
	code, body = httpGet(addr, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `posting_worker_publications_total{instance_id="worker-http",outcome="published"} 0`)
	require.Contains(t, body, "go_goroutines")

	b.Stop()
	require.Equal(t, "not ready: check kafka failed\n", waitUnready(t, addr))
	b.Restart(t)
	require.Eventually(t, func() bool { code, _ := httpGet(addr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 100*time.Millisecond, "ready again once the broker is back")

	proxy.Cut()
	require.Equal(t, "not ready: check database failed\n", waitUnready(t, addr))
	code, _ = httpGet(addr, "/healthz")
	require.Equal(t, http.StatusOK, code, "alive while not ready")
}
