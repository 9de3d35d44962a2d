// Package httpserver is the HTTP server of the long-running commands (serve
// and worker): net/http's server with every timeout set and a bound on the
// connections open at once, so slow, idle and too many clients cannot hold
// the process's file descriptors and goroutines for ever.
package httpserver

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/postingsvc/posting/config"
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
	// MaxConns is the number of connections served at once; more wait in
	// the listen queue until one closes. Default 1000; 1..MaxMaxConns.
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
	return &Server{
		Server: &http.Server{
			Addr:              ln.Addr().String(),
			Handler:           h,
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			ReadTimeout:       cfg.ReadTimeout,
			WriteTimeout:      cfg.WriteTimeout,
			IdleTimeout:       cfg.IdleTimeout,
		},
		ln: netutil.LimitListener(ln, cfg.MaxConns),
	}, nil
}

// Serve serves until Shutdown or Close, as http.Server.Serve does.
func (s *Server) Serve() error { return s.Server.Serve(s.ln) }
