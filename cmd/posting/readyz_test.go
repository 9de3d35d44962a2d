package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// tcpProxy forwards connections to a target until Close, which also cuts the
// connections it carries: a database outage as a client sees it.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.Close)
	return p
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// readyEnv is a MariaDB database behind a proxy the test can cut, and a
// broker it can stop.
func readyEnv(t *testing.T) (*tcpProxy, *kafkatest.Broker, string) {
	t.Helper()
	u, err := url.Parse(databasetest.MySQLURL(t, "ready"))
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target += ":3306"
	}
	proxy := startProxy(t, target)
	u.Host = proxy.Addr()
	return proxy, kafkatest.Start(t), u.String()
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

	proxy.Close()
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

	proxy.Close()
	require.Equal(t, "not ready: check database failed\n", waitUnready(t, addr))
	code, _ = httpGet(addr, "/healthz")
	require.Equal(t, http.StatusOK, code, "alive while not ready")
}
