package httpserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/httpserver"
	"github.com/postingsvc/posting/internal/platform/httpserver/httpservertest"
)

// startServer serves h with cfg on a loopback port and returns its address.
func startServer(t *testing.T, cfg httpserver.Config, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := httpserver.New(ln, h, cfg)
	require.NoError(t, err)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// requireNewClientServed opens a new connection to addr and requires its
// GET / answered 200, msg saying what was in the way; the connection stays
// open until the test ends.
func requireNewClientServed(t *testing.T, addr, msg string) {
	t.Helper()
	c, r := httpservertest.Dial(t, addr)
	// A guard, not the assertion: without room made at MaxConns it waits an hour.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := httpservertest.Get(c, r, "/")
	require.NoError(t, err, msg)
	require.Equal(t, http.StatusOK, resp.StatusCode, msg)
}

// With MaxConns 1, a second connection is not served while the first one's
// request is in progress, and is served once it ends.
func TestMaxConnsBoundsConnectionsServed(t *testing.T) {
	t.Parallel()
	cfg := httpserver.DefaultConfig()
	cfg.MaxConns = 1
	entered, release := make(chan struct{}), make(chan struct{})
	addr := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		_, _ = fmt.Fprint(w, "ok")
	}))
	first, firstR := httpservertest.Dial(t, addr)
	firstDone := make(chan error, 1)
	go func() { _, err := httpservertest.Get(first, firstR, "/slow"); firstDone <- err }()
	<-entered
	second, r := httpservertest.Dial(t, addr) // accepted by the kernel, not served
	require.NoError(t, second.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
	_, err := httpservertest.Get(second, r, "/")
	var netErr net.Error
	require.True(t, errors.As(err, &netErr) && netErr.Timeout(), "second connection served while the first is busy")

	close(release)
	require.NoError(t, <-firstDone)
	require.NoError(t, second.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(r, nil) // the request sent above
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Connections that sit idle between requests do not keep a new client out:
// at MaxConns a new connection is served at once, the longest idle one is
// closed to make room, and the others keep being served.
func TestIdleConnectionsGiveWayAtMaxConns(t *testing.T) {
	t.Parallel()
	cfg := httpserver.DefaultConfig()
	cfg.MaxConns = 2
	cfg.IdleTimeout = time.Hour
	addr := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "ok")
	}))
	var idle []net.Conn
	var readers []*bufio.Reader
	for range cfg.MaxConns {
		c, r := httpservertest.Dial(t, addr)
		_, err := httpservertest.Get(c, r, "/")
		require.NoError(t, err)
		idle, readers = append(idle, c), append(readers, r)
	}

	requireNewClientServed(t, addr, "a new client served while idle connections fill MaxConns")

	// The one that has waited longest was closed to make room before next
	// was admitted. The two went idle a moment apart, and which went first
	// is when the server saw each answer out, which a loaded machine can
	// reorder: exactly one is closed, and the other is still served.
	closed := -1
	for i := range idle {
		require.NoError(t, idle[i].SetReadDeadline(time.Now().Add(time.Second)))
		if _, err := readers[i].ReadByte(); errors.Is(err, io.EOF) {
			closed = i
			break
		}
	}
	require.NotEqual(t, -1, closed, "an idle connection was closed")
	kept := 1 - closed
	require.NoError(t, idle[kept].SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := httpservertest.Get(idle[kept], readers[kept], "/")
	require.NoError(t, err, "the other idle connection is still served")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Every limit out of its bounds is refused, naming the field.
func TestConfigRefusesLimitsOutOfBounds(t *testing.T) {
	t.Parallel()
	for field, edit := range map[string]func(*httpserver.Config){
		"ReadHeaderTimeout": func(c *httpserver.Config) { c.ReadHeaderTimeout = c.ReadTimeout + time.Second },
		"ReadTimeout":       func(c *httpserver.Config) { c.ReadTimeout = 0 },
		"WriteTimeout":      func(c *httpserver.Config) { c.WriteTimeout = 2 * time.Hour },
		"IdleTimeout":       func(c *httpserver.Config) { c.IdleTimeout = time.Millisecond },
		"MaxConns":          func(c *httpserver.Config) { c.MaxConns = 0 },
	} {
		c := httpserver.DefaultConfig()
		edit(&c)
		var ce *config.Error
		require.ErrorAs(t, c.Validate(), &ce, field)
		require.Equal(t, "httpserver.Config."+field, ce.Field)
	}
	require.NoError(t, httpserver.DefaultConfig().Validate())
}

// Connections that never finish a request's headers (silent, or sending
// them a byte at a time) do not keep a new client out either: net/http
// reads a first request's headers in the state StateNew, and at MaxConns a
// new connection closes the one that has waited longest without a request,
// instead of waiting out the read header timeout.
func TestConnectionsWithoutARequestGiveWayAtMaxConns(t *testing.T) {
	t.Parallel()
	cfg := httpserver.DefaultConfig()
	cfg.MaxConns = 2
	cfg.ReadTimeout, cfg.ReadHeaderTimeout, cfg.IdleTimeout = time.Hour, time.Hour, time.Hour
	addr := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "ok")
	}))
	silent, _ := httpservertest.Dial(t, addr)
	trickle, _ := httpservertest.Dial(t, addr)
	_, err := fmt.Fprint(trickle, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ") // headers never finished
	require.NoError(t, err)

	for range 2 { // each closes one of them; the first one stays open, idle
		requireNewClientServed(t, addr, "a new client served while connections without a request fill MaxConns")
	}
	for _, c := range []net.Conn{silent, trickle} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
		_, err = c.Read(make([]byte, 1))
		require.Error(t, err, "the connection without a request was closed")
	}
}

// A connection that has just arrived is not closed for the next one while
// its request is on its way: with every slot taken, new connections wait
// for NewConnGrace before one of them gives way, so the first one's request
// is read and answered.
func TestANewConnectionHasTimeToSendItsRequest(t *testing.T) {
	t.Parallel()
	cfg := httpserver.DefaultConfig()
	cfg.MaxConns = 1
	addr := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "ok")
	}))
	first, r := httpservertest.Dial(t, addr)
	httpservertest.Dial(t, addr) // a second one, waiting for the only slot
	resp, err := httpservertest.Get(first, r, "/")
	require.NoError(t, err, "the first connection was closed for the second before its request was read")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// A request answered without its body being read (a 404 for an unknown
// path, a refusal on its headers) is answered at once with Connection:
// close. Left to itself net/http would read up to 256 KiB of the body
// before answering, to keep the connection: a client trickling its body
// would hold the connection for the whole read timeout, even on a path
// that exists for nobody.
func TestAnAnswerWithoutReadingTheBodyDoesNotWaitForIt(t *testing.T) {
	t.Parallel()
	cfg := httpserver.DefaultConfig()
	cfg.ReadTimeout = time.Hour
	addr := startServer(t, cfg, http.NotFoundHandler())
	conn := httpservertest.PostHeaders(t, addr, "/nowhere", 1000)
	_, err := fmt.Fprint(conn, "{")
	require.NoError(t, err)
	// Waiting for the body would wait an hour.
	httpservertest.RequireClosingAnswer(t, conn, 30*time.Second, http.StatusNotFound, "no answer before the body arrived")
}

// A request whose body was read keeps its connection alive.
func TestAnAnswerAfterReadingTheBodyKeepsTheConnection(t *testing.T) {
	t.Parallel()
	addr := startServer(t, httpserver.DefaultConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	conn, r := httpservertest.Dial(t, addr)
	for range 2 {
		_, err := fmt.Fprint(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.False(t, resp.Close)
	}
}
