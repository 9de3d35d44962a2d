package api_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
)

// startUpload opens a batch request whose body of size bytes the client
// has not sent, with Expect: 100-continue, and returns the connection and
// the first status line the server answers: "100 Continue" once the handler
// starts reading the body, or the final answer of a request refused
// without it.
func (e *apiEnv) startUpload(t *testing.T, token string, size int64) (net.Conn, string) {
	t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: posting\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"Expect: 100-continue\r\n%s\r\n", batchPath, size, auth)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	return conn, strings.TrimSpace(strings.TrimPrefix(line, "HTTP/1.1 "))
}

// The bodies of batches being read at once are bounded: while two uploads
// of the largest body are under way, a third batch, however small, is
// refused with 503 and Retry-After without its body being read, and writes
// nothing. Once the uploads end, batches pass again. Without the bound a
// few dozen clients sending 80 MiB bodies make a serve hold gigabytes.
func TestBatchBodiesBeingReadAreBoundedAndTheRestTurnedAway(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), nil)
	var uploads []net.Conn
	for range api.MaxBatchBytesReading / api.MaxBatchBodyBytes {
		conn, status := e.startUpload(t, "", api.MaxBatchBodyBytes)
		require.Equal(t, "100 Continue", status)
		uploads = append(uploads, conn)
	}

	check := writesNothing(t, e.db.DB)
	_, status := e.startUpload(t, "", api.MaxBatchBodyBytes)
	require.True(t, strings.HasPrefix(status, "503 "), "a third large upload: %s", status)
	resp, body := e.sendBatch(t, "", "", batchBody(2, nil))
	p := requireBatchProblem(t, resp, body, http.StatusServiceUnavailable)
	require.Contains(t, p.Detail, "retry")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	check()

	for _, c := range uploads {
		require.NoError(t, c.Close())
	}
	require.Eventually(t, func() bool {
		resp, _ := e.sendBatch(t, "", "", batchBody(2, nil))
		return resp.StatusCode == http.StatusCreated
	}, 10*time.Second, 20*time.Millisecond, "batches pass once the uploads have ended")
}

// A caller whose writes are spent is refused with 429 before the server
// reads its batch's body: the write limit also bounds how many bodies a
// caller makes the server read.
func TestBatchOfACallerWithoutWritesLeftIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), func(c *api.Config) {
		c.Auth = verifier(t, testSecret, "")
		c.WriteLimit = api.WriteLimit{Requests: 10, Window: time.Hour}
	})
	alice := tokenFor(t, "alice")
	resp, body := e.sendBatch(t, alice, "", batchBody(10, nil))
	requireBatchCreated(t, resp, body, 10, false)
	require.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))

	_, status := e.startUpload(t, alice, api.MaxBatchBodyBytes)
	require.True(t, strings.HasPrefix(status, "429 "), "an upload of a caller without writes left: %s", status)

	// Another caller's body is read as before.
	_, status = e.startUpload(t, tokenFor(t, "bob"), 1000)
	require.Equal(t, "100 Continue", status)
}

// A body of millions of tiny items ("posts":[0,0,0,...]) is refused as over
// 1,000 posts without each item being decoded on its own: the answer costs
// a few times the body's memory, not hundreds (an 80 MiB body of them took
// 6 GiB and half a minute to refuse). Not parallel: it reads the process's
// allocation counter.
func TestBatchOfMillionsOfItemsIsRefusedInMemoryBoundedByItsBody(t *testing.T) {
	h, err := api.NewHandler(api.Config{Posts: apiSetup(t, databasetest.NewSQLite(t), nil).svc})
	require.NoError(t, err)
	const items = 2_000_000
	body := []byte(`{"posts":[` + strings.Repeat("0,", items-1) + `0]}`)
	req := httptest.NewRequest(http.MethodPost, batchPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	p := requireBatchProblem(t, rec.Result(), rec.Body.Bytes(), http.StatusBadRequest)
	require.Equal(t, []string{"/posts"}, p.pointers())
	require.Contains(t, p.Detail, "at most 1000 posts")
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Lessf(t, allocated, uint64(10*len(body)), "allocated %d MiB for a body of %d MiB", allocated>>20, len(body)>>20)
}
