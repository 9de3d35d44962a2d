package httpserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/httpserver"
)

// With MaxConns 1, a second connection is not served while the first is
// open, and is served once it closes.
func TestMaxConnsBoundsConnectionsServed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := httpserver.DefaultConfig()
	cfg.MaxConns = 1
	srv, err := httpserver.New(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "ok")
	}), cfg)
	require.NoError(t, err)
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })

	get := func(c net.Conn) error {
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	first, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, get(first))
	second, err := net.Dial("tcp", ln.Addr().String()) // accepted by the kernel, not by the server
	require.NoError(t, err)
	defer second.Close()
	require.NoError(t, second.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
	var netErr net.Error
	require.True(t, errors.As(get(second), &netErr) && netErr.Timeout(), "second connection served while the first is open")

	require.NoError(t, first.Close())
	require.NoError(t, second.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(second), nil) // the request sent above
	require.NoError(t, err)
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
