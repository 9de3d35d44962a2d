package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/httpserver/httpservertest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// serveInProcess runs serve with args added to a fresh data dir and free
// addresses, and returns its HTTP address once it is ready.
func serveInProcess(t *testing.T, args ...string) string {
	t.Helper()
	httpAddr := freeAddr(t)
	logs := &logtest.Buffer{}
	runInProcess(t, logs, append([]string{"serve", "--http-addr", httpAddr, "--embedded-kafka-addr", freeAddr(t),
		"--data-dir", t.TempDir()}, args...)...)
	require.Eventually(t, func() bool { code, _ := httpGet(httpAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "serve never became ready: %s", logs)
	return httpAddr
}

// A body sent a byte a second is cut by the read timeout: 408 problem+json,
// long before the body could have arrived, and the connection is closed.
func TestServeCutsASlowBody(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--http-read-timeout", "2s", "--http-read-header-timeout", "1s")
	const bodyLen = 600 // 10 minutes at a byte a second
	conn := httpservertest.PostHeaders(t, addr, "/api/v1/posts", bodyLen, "Authorization: Bearer none")
	sent := make(chan int, 1)
	go func() {
		n := 0
		for ; n < bodyLen; n++ {
			if _, err := conn.Write([]byte(" ")); err != nil {
				break
			}
			time.Sleep(time.Second)
		}
		sent <- n
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Minute))) // a guard, not the assertion
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(body))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, string(body), "read timeout")
	require.True(t, resp.Close, "the connection is closed after a cut body")
	_ = conn.Close()
	require.Less(t, <-sent, bodyLen, "the answer came before the whole body")
}

// A request refused on its headers (a bad token) is answered at once: its
// body, still arriving, is not waited for, and the connection is closed.
// The read below is bounded well below the read timeout (30s by default),
// which is when net/http would answer had it waited for the body.
func TestServeRefusesABadTokenWithoutReadingItsBody(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--auth-jwt-secret", cliSecret)
	conn := httpservertest.PostHeaders(t, addr, "/api/v1/posts", 1000, "Authorization: Bearer not-a-token")
	_, err := conn.Write([]byte("{"))
	require.NoError(t, err)
	httpservertest.RequireClosingAnswer(t, conn, 10*time.Second, http.StatusUnauthorized, "no 401 before the body arrived")
}

// An idle keep-alive connection is closed by the server after the idle
// timeout, while a client that keeps talking on its connection is served.
func TestServeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--http-idle-timeout", "1s")
	conn, r := httpservertest.Dial(t, addr)
	get := func() {
		resp, err := httpservertest.Get(conn, r, "/healthz")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.False(t, resp.Close)
	}
	get()
	get()                                                                 // a normal client on a kept-alive connection is unaffected
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute))) // a guard, not the assertion
	_, err := r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closed the idle connection")
}

// The worker's HTTP server closes idle connections too, and counts its
// requests by the route they matched.
func TestWorkerClosesIdleConnectionsAndCountsRoutes(t *testing.T) {
	t.Parallel()
	_, b, dbURL := readyEnv(t)
	addr := freeAddr(t)
	startBinary(t, addr, []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_KAFKA_BROKERS=" + b.Addr,
		"POSTING_WORKER_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_IDLE_TIMEOUT=1s"}, "worker")
	conn, r := httpservertest.Dial(t, addr)
	_, err := httpservertest.Get(conn, r, "/healthz")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the worker closed the idle connection")

	m := scrape(t, addr)
	require.Equal(t, "1", requestsCounted(m, "GET /healthz", "200"), m)
	require.Empty(t, requestsCounted(m, "unmatched", "200"))
}

// Every HTTP limit out of its bounds stops serve and worker with status 2,
// naming the setting.
func TestHTTPLimitSettingsRefused(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"serve", "worker"} {
		for env, want := range map[string]string{
			"POSTING_HTTP_READ_TIMEOUT=0s":         `POSTING_HTTP_READ_TIMEOUT="0s"`,
			"POSTING_HTTP_READ_HEADER_TIMEOUT=31s": `POSTING_HTTP_READ_HEADER_TIMEOUT="31s"`,
			"POSTING_HTTP_WRITE_TIMEOUT=2h":        `POSTING_HTTP_WRITE_TIMEOUT="2h0m0s"`,
			"POSTING_HTTP_IDLE_TIMEOUT=soon":       `POSTING_HTTP_IDLE_TIMEOUT="soon"`,
			"POSTING_HTTP_MAX_CONNS=0":             `POSTING_HTTP_MAX_CONNS="0"`,
		} {
			out, code := runBinary(t, []string{env, "POSTING_DATA_DIR=" + t.TempDir()}, cmd)
			require.Equal(t, exitUsage, code, "%s %s: %s", cmd, env, out)
			require.Contains(t, out, want, "%s %s", cmd, env)
		}
	}
}

// An admin token shorter than 32 bytes stops serve with status 2, naming
// POSTING_ADMIN_TOKEN and never showing the token.
func TestServeRefusesAShortAdminToken(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_ADMIN_TOKEN=short-admin-token", "POSTING_DATA_DIR=" + t.TempDir()}, "serve")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "POSTING_ADMIN_TOKEN")
	require.Contains(t, out, "at least 32 bytes")
	require.NotContains(t, out, "short-admin-token")
}

// An admin purge longer than the write timeout answers in time: serve gives
// it a third of POSTING_HTTP_WRITE_TIMEOUT, and each call answers 200 with
// what remains until one says complete. A whole purge of these 8192 rows
// takes 16 pauses of 100 ms, past the 1 s budget of a 3 s write timeout:
// the client got an empty reply. The other two seconds leave room for the
// statement in flight and the count on a loaded machine.
func TestServeAdminPurgeAnswersWithinTheWriteTimeout(t *testing.T) {
	t.Parallel()
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "purge.db")
	adminToken := strings.Repeat("k", 32)
	addr := serveInProcess(t, "--database-url", dbURL, "--admin-token", adminToken, "--http-write-timeout", "3s")
	db, err := database.Open(dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// Sent two days ago: older than the purge's hour, younger than the
	// cleaner's 168h, which serve runs at start.
	sentAt := database.Normalize(time.Now().Add(-48 * time.Hour))
	m := reservationtest.Append(t, db.DB, 1, sentAt.Add(-time.Minute))
	require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", m.ID).
		Updates(map[string]any{"status": outbox.StatusSent, "sent_at": sentAt}).Error)
	for range 13 {
		require.NoError(t, db.Exec("INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, "+
			"next_attempt_at, sent_at) SELECT lower(hex(randomblob(18))), event_type, aggregate_id, payload, created, status, "+
			"next_attempt_at, sent_at FROM outbox").Error)
	}

	deleted, calls := 0, 0
	for {
		calls++
		start := time.Now()
		resp := sendRequest(t, http.MethodPost, "http://"+addr+"/admin/outbox/purge?olderThan=1h", adminToken, "")
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Less(t, time.Since(start), 3*time.Second, "answered within the write timeout")
		var got struct {
			Deleted, Remaining int
			Complete           bool
		}
		require.NoError(t, json.Unmarshal(body, &got), string(body))
		deleted += got.Deleted
		require.Equal(t, 8192-deleted, got.Remaining, string(body))
		if got.Complete {
			break
		}
		require.Less(t, calls, 100, "the purge never completed")
	}
	require.Equal(t, 8192, deleted)
	require.Greater(t, calls, 1, "one call could not have deleted them all in time")
}
