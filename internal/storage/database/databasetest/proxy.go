package databasetest

import (
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of a test database server: the network
// between the server and code that opens its own pools (the built binary,
// several instances), for the test to take away. Cut resets every connection
// and refuses new ones, Stall holds every byte both ways without a reset,
// and Resume ends either. For code that runs on a *gorm.DB the test holds,
// Outage and Fail fail statements without a network.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	state   proxyState
	changed chan struct{} // closed and replaced at every change of state
	conns   map[net.Conn]struct{}
}

type proxyState int

const (
	proxyOpen proxyState = iota
	proxyStalled
	proxyCut
	proxyClosed
)

// NewProxy starts a proxy to target (host:port), closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Proxied returns dbURL, a mysql:// or postgres:// URL of a test database
// (from URL), with its host replaced by a new proxy to that server, and the
// proxy.
func Proxied(t testing.TB, dbURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("proxied URL: %v", err)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"mysql": "3306", "postgres": "5432", "postgresql": "5432"}[u.Scheme]
	}
	if port == "" {
		t.Fatalf("proxied URL: no server port in %s", u.Redacted())
	}
	p := NewProxy(t, net.JoinHostPort(u.Hostname(), port))
	u.Host = p.Addr()
	return u.String(), p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut resets every connection through the proxy, and every new one until
// Resume: the server gone, as a client sees a crash or a lost route.
func (p *Proxy) Cut() { p.set(proxyCut) }

// Stall holds every byte through the proxy, both ways and on new
// connections too, until Resume or Cut: a network that drops packets
// without a reset, where only a timeout ends a statement.
func (p *Proxy) Stall() { p.set(proxyStalled) }

// Resume lets connections through again after Cut or Stall; what a stalled
// connection held is then delivered.
func (p *Proxy) Resume() { p.set(proxyOpen) }

// Close cuts every connection and stops listening, for good.
func (p *Proxy) Close() {
	p.set(proxyClosed)
	_ = p.ln.Close()
}

func (p *Proxy) set(s proxyState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == proxyClosed {
		return
	}
	p.state = s
	close(p.changed)
	p.changed = make(chan struct{})
	if s == proxyCut || s == proxyClosed {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		go p.carry(client)
	}
}

// carry connects client to the target and copies both ways.
func (p *Proxy) carry(client net.Conn) {
	if !p.track(client) {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		p.drop(client)
		return
	}
	go p.pipe(server, client)
	p.pipe(client, server)
}

// track adds c to the connections a Cut closes, or closes it at once when
// the proxy is cut or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == proxyCut || p.state == proxyClosed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// pipe copies from src to dst, each read held while the proxy is stalled,
// and closes both when either ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.drop(dst)
	defer p.drop(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the proxy is stalled, and tells whether bytes may go on.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.state == proxyStalled {
		changed := p.changed
		p.mu.Unlock()
		<-changed
		p.mu.Lock()
	}
	return p.state == proxyOpen
}

func (p *Proxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}
