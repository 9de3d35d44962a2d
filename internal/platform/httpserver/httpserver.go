// Package httpserver is the HTTP server of the long-running commands:
// net/http's server with every timeout set and a bound on the connections
// open at once.
package httpserver

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postingsvc/posting/internal/platform/config"
)

// The limits of Config's fields.
const (
	MinTimeout  = time.Second
	MaxTimeout  = time.Hour
	MaxMaxConns = 100_000
)

// Config bounds what one client may take of the server.
type Config struct {
	// ReadHeaderTimeout bounds the reading of a request's headers (a
	// Slowloris client sends them a byte at a time). Default 10s;
	// MinTimeout..ReadTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, headers and body.
	// A body still arriving then is cut: the handler's read fails, and the
	// API answers 408. Default 30s; MinTimeout..MaxTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response. Default 60s; MinTimeout..MaxTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request. Default 120s; MinTimeout..MaxTimeout.
	IdleTimeout time.Duration
	// MaxConns is the number of connections served at once. A new
	// connection beyond it closes the one that has waited longest without a
	// request in progress (an idle keep-alive connection, or one that has
	// not finished its first request's headers NewConnGrace after it
	// arrived) to take its place; with
	// none such it waits until one closes or goes idle. Default 1000;
	// 1..MaxMaxConns.
	MaxConns int
}

// DefaultConfig returns the defaults: limits that suit an API behind a load
// balancer (whose own idle timeout, often 60s, is shorter than ours).
func DefaultConfig() Config {
	return Config{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxConns:          1000,
	}
}

// Validate reports a field out of its limits as a *config.Error naming it.
func (c Config) Validate() error {
	const f = "httpserver.Config."
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReadTimeout", c.ReadTimeout}, {"WriteTimeout", c.WriteTimeout}, {"IdleTimeout", c.IdleTimeout}} {
		if d.v < MinTimeout || d.v > MaxTimeout {
			return config.Invalid(f+d.name, d.v.String(), "want %s..%s", MinTimeout, MaxTimeout)
		}
	}
	if c.ReadHeaderTimeout < MinTimeout || c.ReadHeaderTimeout > c.ReadTimeout {
		return config.Invalid(f+"ReadHeaderTimeout", c.ReadHeaderTimeout.String(),
			"want %s..%s (the read timeout, which covers the headers too)", MinTimeout, c.ReadTimeout)
	}
	if c.MaxConns < 1 || c.MaxConns > MaxMaxConns {
		return config.Invalid(f+"MaxConns", c.MaxConns, "want 1..%d", MaxMaxConns)
	}
	return nil
}

// Server serves a handler on a listener within the limits of its Config.
type Server struct {
	*http.Server
	ln net.Listener
}

// New returns a server of h on ln; Serve starts it, Shutdown (of the
// embedded http.Server) stops it.
func New(ln net.Listener, h http.Handler, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ll := newLimitListener(ln, cfg.MaxConns)
	return &Server{
		Server: &http.Server{
			Addr:              ln.Addr().String(),
			Handler:           closeUnread(h),
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			ReadTimeout:       cfg.ReadTimeout,
			WriteTimeout:      cfg.WriteTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			ConnState:         ll.connState,
		},
		ln: ll,
	}, nil
}

// Serve serves until Shutdown or Close, as http.Server.Serve does.
func (s *Server) Serve() error { return s.Server.Serve(s.ln) }

// limitListener serves at most cap(sem) connections at once. Unlike
// netutil.LimitListener it does not let connections without a request in
// progress keep new clients out for the whole idle or read header timeout:
// a connection accepted beyond the limit closes the one that has waited
// longest for a request (idle keep-alive, or not yet past its first
// request's headers: a Slowloris client; net/http reports the states
// through ConnState), as those timeouts would have.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	idle    map[*limitConn]waitingSince // each connection without a request in progress
	waiting bool                        // Accept holds a connection without a slot
	wake    chan struct{}               // a connection went idle while waiting
}

// waitingSince is since when a connection waits for a request, and whether
// it has yet to send its first (StateNew).
type waitingSince struct {
	at    time.Time
	fresh bool
}

// NewConnGrace is how long a new connection may take to send its first
// request's headers before a connection beyond MaxConns may close it: a
// client's request is on its way right after it connects, so without the
// grace, connections arriving while every slot is busy would close each
// other before any was read.
const NewConnGrace = time.Second

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{}),
		idle: map[*limitConn]waitingSince{}, wake: make(chan struct{}, 1)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		select {
		case l.sem <- struct{}{}:
			return l.admitted(c), nil
		default:
		}
		l.mu.Lock()
		l.waiting = true
		victim, recheck := l.longestIdle(time.Now())
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close() // frees its slot
		}
		ok, err := l.await(recheck)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		if ok {
			return l.admitted(c), nil
		}
	}
}

// await waits for a free slot (true), a connection gone idle or the end of
// recheck when it is not 0 (false, to look for a victim again), or the
// listener's close (net.ErrClosed).
func (l *limitListener) await(recheck time.Duration) (bool, error) {
	var grace <-chan time.Time
	if recheck > 0 { // a new connection's grace ends then
		t := time.NewTimer(recheck)
		defer t.Stop()
		grace = t.C
	}
	select {
	case l.sem <- struct{}{}:
		return true, nil
	case <-l.wake:
	case <-grace:
	case <-l.done:
		return false, net.ErrClosed
	}
	return false, nil
}

// admitted wraps c, which holds a slot.
func (l *limitListener) admitted(c net.Conn) net.Conn {
	l.mu.Lock()
	l.waiting = false
	l.mu.Unlock()
	return &limitConn{Conn: c, l: l}
}

// longestIdle removes and returns the connection that has waited longest
// for a request, leaving new ones within NewConnGrace; nil if there is none,
// and then how long until the first new one's grace ends (0: none is
// waiting). l.mu is held.
func (l *limitListener) longestIdle(now time.Time) (*limitConn, time.Duration) {
	var victim *limitConn
	var recheck time.Duration
	for c, w := range l.idle {
		if left := w.at.Add(NewConnGrace).Sub(now); w.fresh && left > 0 {
			if recheck == 0 || left < recheck {
				recheck = left
			}
			continue
		}
		if victim == nil || w.at.Before(l.idle[victim].at) {
			victim = c
		}
	}
	if victim == nil {
		return nil, recheck
	}
	delete(l.idle, victim)
	return victim, 0
}

// connState is the http.Server's ConnState hook: it keeps the set of idle
// connections.
func (l *limitListener) connState(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// net/http reads a first request's headers in StateNew and a later
	// one's in StateIdle, and reports StateActive only once they are all
	// in: a connection silent or trickling its headers is as idle as a
	// kept-alive one, and gives way the same.
	if state != http.StateIdle && state != http.StateNew {
		delete(l.idle, lc)
		return
	}
	l.idle[lc] = waitingSince{at: time.Now(), fresh: state == http.StateNew}
	if l.waiting {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l         *limitListener
	closeOnce sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.sem
	})
	return err
}

// closeUnread answers a request whose body its handler did not read to the
// end with Connection: close. Otherwise net/http, to keep the connection,
// reads up to 256 KiB of what is left before it writes the answer: a 404,
// a 405 or any refusal on the headers would wait for a body trickling in,
// and a client could hold the connection for the whole read timeout on a
// path that exists for nobody.
func closeUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		body := &eofBody{ReadCloser: r.Body}
		r.Body = body
		h.ServeHTTP(&closeUnreadWriter{ResponseWriter: w, body: body}, r)
	})
}

// eofBody records whether its reader reached the end.
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// closeUnreadWriter sets Connection: close on an answer written before its
// request's body was read to the end.
type closeUnreadWriter struct {
	http.ResponseWriter
	body  *eofBody
	wrote bool
}

func (w *closeUnreadWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnreadWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *closeUnreadWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush on (streaming answers).
func (w *closeUnreadWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
