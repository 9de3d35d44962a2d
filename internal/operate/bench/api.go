package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// newHTTPClient is a client that keeps one connection per concurrent caller.
func newHTTPClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conns
	t.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// createBody is the JSON body of a create scheduled ahead of now.
func createBody(now time.Time) []byte {
	return []byte(`{"title":"` + postTitle + `","content":"` + postContent + `","scheduledAt":"` +
		now.Add(scheduledAhead).UTC().Format(time.RFC3339) + `"}`)
}

// createPost sends POST /api/v1/posts and returns the new post's id, read
// from the Location header of the 201.
func createPost(ctx context.Context, client *http.Client, baseURL string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/v1/posts", bytes.NewReader(createBody(time.Now())))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST /api/v1/posts: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, fmt.Errorf("POST /api/v1/posts: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("POST /api/v1/posts answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	loc := resp.Header.Get("Location")
	id, err := strconv.ParseInt(strings.TrimPrefix(loc, "/api/v1/posts/"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("POST /api/v1/posts answered 201 with Location %q, want /api/v1/posts/{id}", loc)
	}
	return id, nil
}

// APICreate creates posts through POST /api/v1/posts of the service at
// baseURL (such as http://127.0.0.1:8080) from clients concurrent clients,
// each on its own keep-alive connection, sending its next request when the
// previous one was answered, for d. Any answer but 201 stops it with an
// error.
//
// The clients write HTTP/1.1 requests and read the answers on the calling
// goroutine (no Transport with its reader and writer goroutines per
// connection), so on a small machine the load generator takes as little as
// it can from the service it measures.
func APICreate(ctx context.Context, baseURL string, clients int, d time.Duration) (Throughput, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return Throughput{}, fmt.Errorf("api create: base URL %q: want http://host:port", baseURL)
	}
	conns := make(chan *leanConn, clients)
	defer func() {
		close(conns)
		for c := range conns {
			_ = c.conn.Close()
		}
	}()
	return runClients(ctx, clients, d, func(ctx context.Context) error {
		var c *leanConn
		select {
		case c = <-conns:
		default:
			var err error
			if c, err = dialLean(ctx, u.Host); err != nil {
				return err
			}
		}
		if err := c.create(ctx); err != nil {
			_ = c.conn.Close()
			return err
		}
		conns <- c
		return nil
	})
}

// APICreateLatency creates posts through POST /api/v1/posts from one
// client, for d: each request is sent when the one before was answered, to
// the services at baseURLs in turn, one keep-alive connection each. It
// returns, for each service, the distribution of the times from sending a
// create to reading its 201: what a lone client waits for a create. The
// first create to each service is not timed. Taking turns, the services
// are measured under the same conditions, whatever the machine does
// meanwhile. Any answer but 201 stops it with an error, and a cancel with
// the cancel's cause.
func APICreateLatency(ctx context.Context, d time.Duration, baseURLs ...string) ([]Latency, error) {
	lat, err := oneClientCreates(ctx, d, baseURLs...)
	if err != nil {
		return nil, err
	}
	out := make([]Latency, len(lat))
	for i, l := range lat {
		out[i] = distribution(l)
	}
	return out, nil
}

// oneClientCreates is APICreateLatency's load: the time of each create, by
// service.
func oneClientCreates(ctx context.Context, d time.Duration, baseURLs ...string) ([][]time.Duration, error) {
	if len(baseURLs) == 0 {
		return nil, errors.New("api create latency: no service")
	}
	conns := make([]*leanConn, 0, len(baseURLs))
	defer func() {
		for _, c := range conns {
			_ = c.conn.Close()
		}
	}()
	for _, baseURL := range baseURLs {
		u, err := url.Parse(baseURL)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("api create latency: base URL %q: want http://host:port", baseURL)
		}
		c, err := dialLean(ctx, u.Host)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	// A cancel cuts a create in progress short, as it does the wait for
	// the next.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			_ = c.conn.SetDeadline(time.Now())
		}
	})
	defer stop()
	create := func(c *leanConn) error {
		err := c.create(ctx)
		if err != nil && ctx.Err() != nil {
			return context.Cause(ctx) // not the deadline the cancel set
		}
		return err
	}
	// The first create on each connection is not timed: after a clean-up
	// it is the slowest by far, and the API taking it would look slower.
	for _, c := range conns {
		if err := create(c); err != nil {
			return nil, err
		}
	}
	lat := make([][]time.Duration, len(conns))
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i, c := range conns {
			start := time.Now()
			if err := create(c); err != nil {
				return nil, err
			}
			lat[i] = append(lat[i], time.Since(start))
		}
	}
	if len(lat[0]) == 0 {
		return nil, fmt.Errorf("api create latency: no create was timed in %s", d)
	}
	return lat, nil
}

// leanConn is one keep-alive HTTP/1.1 connection to the service.
type leanConn struct {
	host string
	conn net.Conn
	r    *bufio.Reader
	buf  []byte
}

func dialLean(ctx context.Context, host string) (*leanConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("api create: %w", err)
	}
	return &leanConn{host: host, conn: conn, r: bufio.NewReader(conn)}, nil
}

// create sends one create and reads its answer, which must be a 201 with
// the new post's Location. A ctx cancelled before it sets the connection's
// deadline stops it there; a caller that cancels later cuts the connection's
// deadline short itself (oneClientCreates).
func (c *leanConn) create(ctx context.Context) error {
	body := createBody(time.Now())
	c.buf = append(c.buf[:0], "POST /api/v1/posts HTTP/1.1\r\nHost: "...)
	c.buf = append(c.buf, c.host...)
	c.buf = append(c.buf, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.buf = strconv.AppendInt(c.buf, int64(len(body)), 10)
	c.buf = append(c.buf, "\r\n\r\n"...)
	c.buf = append(c.buf, body...)
	if err := c.conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if _, err := c.conn.Write(c.buf); err != nil {
		return fmt.Errorf("POST /api/v1/posts: %w", err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return fmt.Errorf("POST /api/v1/posts: read the answer: %w", err)
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("POST /api/v1/posts: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST /api/v1/posts answered %s: %s", resp.Status, strings.TrimSpace(string(answer)))
	}
	if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, "/api/v1/posts/") {
		return fmt.Errorf("POST /api/v1/posts answered 201 with Location %q, want /api/v1/posts/{id}", loc)
	}
	if resp.Close {
		return errors.New("POST /api/v1/posts: the service closed the connection")
	}
	return nil
}
