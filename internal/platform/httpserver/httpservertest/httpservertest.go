// Package httpservertest helps tests of an HTTP server at the connection
// level: a request whose body has not arrived, and the answer it gets.
package httpservertest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Dial opens a connection to addr, closed when the test ends, and a reader
// of its answers.
func Dial(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// Get sends a GET of path on c and reads its answer from r (c's reader,
// kept across requests), the body read to its end and closed.
func Get(c net.Conn, r *bufio.Reader, path string) (*http.Response, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, c.RemoteAddr()); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp, errors.Join(err, resp.Body.Close())
}

// PostHeaders opens a connection to addr and sends the headers of a POST of
// path with a JSON body of bodyLen bytes, and the header lines given
// ("Authorization: Bearer x"), and nothing of the body yet. The connection
// is closed when the test ends.
func PostHeaders(t testing.TB, addr, path string, bodyLen int, header ...string) net.Conn {
	t.Helper()
	conn, _ := Dial(t, addr)
	var extra strings.Builder
	for _, h := range header {
		extra.WriteString(h + "\r\n")
	}
	_, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
		path, addr, extra.String(), bodyLen)
	require.NoError(t, err)
	return conn
}

// RequireClosingAnswer reads the answer on conn, waiting at most guard (a
// guard, not the assertion: well below the timeout a server would answer
// at had it waited for the body), and requires its status and Connection:
// close. msg says what a missing answer means.
func RequireClosingAnswer(t testing.TB, conn net.Conn, guard time.Duration, status int, msg string) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(guard)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, msg)
	require.Equal(t, status, resp.StatusCode)
	require.True(t, resp.Close, "Connection: close")
}
