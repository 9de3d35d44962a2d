package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// batchBody is the JSON body of a batch of size posts scheduled ahead of
// now, each the post a single create of the bench writes.
func batchBody(now time.Time, size int) []byte {
	item := createBody(now)
	b := make([]byte, 0, len(`{"posts":[]}`)+size*(len(item)+1))
	b = append(b, `{"posts":[`...)
	for i := range size {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, item...)
	}
	return append(b, "]}"...)
}

// APIBatchCreate creates posts through POST /api/v1/posts/batch, size posts
// a request, from clients concurrent clients on keep-alive connections, as
// APICreate does with single creates, for d. Its Count is posts, not
// requests. Any answer but 201 stops it with an error.
func APIBatchCreate(ctx context.Context, baseURL string, clients, size int, d time.Duration) (Throughput, error) {
	conns, closeAll, err := batchConns(baseURL, clients)
	if err != nil {
		return Throughput{}, err
	}
	defer closeAll()
	t, err := runClients(ctx, clients, d, func(ctx context.Context) error {
		return conns.send(ctx, size)
	})
	t.Count *= size
	return t, err
}

// APIBatchTotal creates total posts through POST /api/v1/posts/batch in
// batches of size (the last one smaller if size does not divide total) from
// clients concurrent clients, and returns how long that took: the time to
// load total posts into the service.
func APIBatchTotal(ctx context.Context, baseURL string, clients, size, total int) (Throughput, error) {
	if size < 1 || total < 1 {
		return Throughput{}, fmt.Errorf("api batch: size %d and total %d must be positive", size, total)
	}
	conns, closeAll, err := batchConns(baseURL, clients)
	if err != nil {
		return Throughput{}, err
	}
	defer closeAll()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64 // posts handed out
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				end := next.Add(int64(size))
				n := size
				if end > int64(total) {
					n = total - int(end-int64(size))
				}
				if n <= 0 {
					return
				}
				if err := conns.send(ctx, n); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return Throughput{}, err
	}
	return Throughput{Count: total, Elapsed: elapsed}, nil
}

// batchPool hands keep-alive connections to the clients of a batch run.
type batchPool struct {
	host  string
	conns chan *leanConn
}

func batchConns(baseURL string, clients int) (*batchPool, func(), error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, nil, fmt.Errorf("api batch: base URL %q: want http://host:port", baseURL)
	}
	p := &batchPool{host: u.Host, conns: make(chan *leanConn, clients)}
	return p, func() {
		close(p.conns)
		for c := range p.conns {
			_ = c.conn.Close()
		}
	}, nil
}

// send creates one batch of size posts on a pooled connection.
func (p *batchPool) send(ctx context.Context, size int) error {
	var c *leanConn
	select {
	case c = <-p.conns:
	default:
		var err error
		if c, err = dialLean(ctx, p.host); err != nil {
			return err
		}
	}
	if err := c.batch(size); err != nil {
		_ = c.conn.Close()
		return err
	}
	p.conns <- c
	return nil
}

// batch sends one batch create of size posts and reads its answer, which
// must be a 201 with as many posts.
func (c *leanConn) batch(size int) error {
	body := batchBody(time.Now(), size)
	c.buf = append(c.buf[:0], "POST /api/v1/posts/batch HTTP/1.1\r\nHost: "...)
	c.buf = append(c.buf, c.host...)
	c.buf = append(c.buf, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.buf = strconv.AppendInt(c.buf, int64(len(body)), 10)
	c.buf = append(c.buf, "\r\n\r\n"...)
	c.buf = append(c.buf, body...)
	if err := c.conn.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		return err
	}
	if _, err := c.conn.Write(c.buf); err != nil {
		return fmt.Errorf("POST /api/v1/posts/batch: %w", err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return fmt.Errorf("POST /api/v1/posts/batch: read the answer: %w", err)
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("POST /api/v1/posts/batch: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST /api/v1/posts/batch answered %s: %s", resp.Status, strings.TrimSpace(string(answer)))
	}
	// Each post of the answer has one "id"; the title and content of the
	// bench's posts hold no such text.
	if n := strings.Count(string(answer), `"id":`); n != size {
		return fmt.Errorf("POST /api/v1/posts/batch answered 201 with %d posts, want %d", n, size)
	}
	if resp.Close {
		return errors.New("POST /api/v1/posts/batch: the service closed the connection")
	}
	return nil
}
