package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/postingsvc/posting/internal/platform/response"
)

// MinTokenBytes is the shortest admin token accepted: 32 bytes, so that
// guessing it is hopeless even at full speed.
const MinTokenBytes = 32

// Defaults of the bound on failed authentications.
const (
	DefaultAuthFailures      = 5
	DefaultAuthFailureWindow = time.Minute
)

// The outcomes of a refused authentication, as audit lines and
// Config.ObserveAuthFailure name them.
const (
	AuthMissing = "missing" // no bearer token
	AuthInvalid = "invalid" // a token that is not the admin token
	AuthLimited = "limited" // refused unheard: too many failures from the source
)

// maxSources bounds the sources the failure counter remembers; past it,
// those whose window has ended are forgotten first.
const maxSources = 10_000

// authorized lets a request through only with the right bearer token. A
// source address with Config.AuthFailures failures in its window is
// answered 429 with Retry-After, its token not even compared, until the
// window ends. Every refusal is counted and is an audit line (source,
// route, outcome; never the token), but for a blocked source's 429s only
// the first of its window.
type authorized struct {
	tokenSum [sha256.Size]byte
	next     http.Handler
	failures *failureCounter // nil: no bound
	log      *slog.Logger
	observe  func(outcome string)
}

const realm = `Bearer realm="posting-admin"`

func (a *authorized) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	source := sourceOf(r)
	if a.failures != nil {
		if wait, first := a.failures.blocked(source); wait > 0 {
			if first {
				a.refused(r, source, AuthLimited)
			} else if a.observe != nil {
				// Counted, not logged again: a flood of refused requests
				// must not become a flood of log lines.
				a.observe(AuthLimited)
			}
			response.Refuse(w)
			w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
			response.WriteProblem(w, http.StatusTooManyRequests, fmt.Sprintf(
				"too many failed admin authentications from %s: at most %d per %s; retry after the time in Retry-After",
				source, a.failures.limit, a.failures.window), "")
			return
		}
	}
	given, ok := bearer(r.Header.Get("Authorization"))
	// Comparing digests keeps the time independent of where the strings
	// differ and of the token's length.
	sum := sha256.Sum256([]byte(given))
	if !ok {
		a.fail(w, r, source, sum, AuthMissing, realm, "an Authorization: Bearer token is required")
		return
	}
	if subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) != 1 {
		a.fail(w, r, source, sum, AuthInvalid, realm+`, error="invalid_token"`, "the bearer token is not valid")
		return
	}
	a.next.ServeHTTP(w, r)
}

// fail answers a failed authentication 401 and counts it against source,
// unless it is the same wrong token (sum) as the source's last failure.
func (a *authorized) fail(w http.ResponseWriter, r *http.Request, source string, sum [sha256.Size]byte,
	outcome, challenge, detail string) {
	if a.failures != nil {
		a.failures.add(source, sum)
	}
	a.refused(r, source, outcome)
	w.Header().Set("WWW-Authenticate", challenge)
	response.Refuse(w)
	response.WriteProblem(w, http.StatusUnauthorized, detail, "")
}

func (a *authorized) refused(r *http.Request, source, outcome string) {
	a.log.LogAttrs(r.Context(), slog.LevelWarn, "audit", slog.String("action", "auth.refused"),
		slog.String("source", source), slog.String("route", r.Pattern), slog.String("outcome", outcome))
	if a.observe != nil {
		a.observe(outcome)
	}
}

// sourceOf is the source the failure limit counts: the connection's IP
// address (a forwarded-for header is the client's to forge); for IPv6 its
// /64, as one host commonly holds a whole /64 and could take a new address
// for each guess; an IPv4-mapped address is its IPv4 address.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}

// bearer returns the token of an "Authorization: Bearer <token>" header; the
// scheme is case-insensitive (RFC 9110 11.1).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// failureCounter counts failures per source in fixed windows that start
// at a source's first failure. A failure with the same token as the
// source's last one is no new guess and is not counted again: the console
// sends several requests at once with the token typed, and a mistyped
// token must not lock its operator out.
type failureCounter struct {
	limit      int
	window     time.Duration
	now        func() time.Time
	maxSources int // the sources remembered at most

	mu      sync.Mutex
	sources map[string]*failures
}

type failures struct {
	count   int
	start   time.Time
	last    [sha256.Size]byte // the digest of the last failed token
	limited bool              // a request was refused unheard in this window
}

// blocked returns how long source must still wait, 0 if it may try, and
// whether this is the first refusal of the source's window.
func (c *failureCounter) blocked(source string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.sources[source]
	if !ok || f.count < c.limit {
		return 0, false
	}
	wait := max(f.start.Add(c.window).Sub(c.now()), 0)
	if wait == 0 {
		return 0, false
	}
	first := !f.limited
	f.limited = true
	return wait, first
}

func (c *failureCounter) add(source string, sum [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	f, ok := c.sources[source]
	if ok && now.Sub(f.start) < c.window && f.last == sum {
		return // the same wrong token again: no new guess
	}
	if !ok || now.Sub(f.start) >= c.window {
		if !ok && len(c.sources) >= c.maxSources {
			c.forgetEnded(now)
		}
		f = &failures{start: now}
		c.sources[source] = f
	}
	f.count++
	f.last = sum
}

// forgetEnded drops the sources whose window has ended; if none has, it
// drops one that is not blocked, and only if every source is blocked the
// one whose window ends first, so the map stays bounded and failing once
// from many addresses does not free a blocked source.
func (c *failureCounter) forgetEnded(now time.Time) {
	var open, first string
	for s, f := range c.sources {
		switch {
		case now.Sub(f.start) >= c.window:
			delete(c.sources, s)
		case f.count < c.limit:
			open = s
		case first == "" || f.start.Before(c.sources[first].start):
			first = s
		}
	}
	if len(c.sources) < c.maxSources {
		return
	}
	if open != "" {
		delete(c.sources, open)
		return
	}
	delete(c.sources, first)
}
