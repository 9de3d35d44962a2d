package api

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"

	"github.com/go-chi/httprate"

	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// guard puts in front of a posts handler what every /api/v1 request goes
// through, in this order: authentication (401 before anything else, so an
// unauthenticated request is neither counted nor served), the write limit
// for writes, and the caller's scope for the service. Each refusal is
// answered before the handler runs, so nothing is written.
//
// limit is the one write limiter of the handler (nil: none), shared by every
// write route so a caller has one budget whichever route it writes through.
func guard(cfg Config, h http.Handler, limit *writeLimiter) http.Handler {
	h = limit.limit(scoped(h))
	if cfg.Auth != nil {
		h = auth.Middleware(cfg.Auth, h)
	}
	return h
}

// charged is guard for a write whose cost the service learns once it has
// checked the input (a series: one write per occurrence within the
// horizon). A caller without a write left is refused first; the request's
// context then carries a reservation.Charge through which the service
// spends the writes, or is refused with 429, before it writes anything.
func charged(cfg Config, h http.Handler, limit *writeLimiter) http.Handler {
	if limit != nil {
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(reservation.WithCharge(r.Context(), limit.charge(w, r))))
		})
	}
	h = limit.refuseSpent(scoped(h))
	if cfg.Auth != nil {
		h = auth.Middleware(cfg.Auth, h)
	}
	return h
}

// scoped hands the authenticated caller to the service as its Scope: its
// own posts, or every post with the admin scope. Without authentication the
// context has no Scope and every post is visible.
func scoped(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := auth.CallerFrom(r.Context()); ok {
			r = r.WithContext(reservation.WithScope(r.Context(),
				reservation.Scope{OwnerID: c.Subject, All: c.Admin()}))
		}
		h.ServeHTTP(w, r)
	})
}

// writeLimiter is one sliding-window limiter shared by every write route of
// the handler, keyed by the caller: a subject's writes count together
// whichever route they use. A nil *writeLimiter limits nothing.
type writeLimiter struct {
	l      WriteLimit
	rl     *httprate.RateLimiter
	keyOf  func(*http.Request) (string, error) // the key rl makes of a request
	detail string                              // the 429's detail for a request of one write
}

// newWriteLimiter returns the limiter of l, or nil when l limits nothing.
func newWriteLimiter(l WriteLimit) *writeLimiter {
	if l.Requests <= 0 {
		return nil
	}
	wl := &writeLimiter{l: l, keyOf: httprate.JoinKeys(callerKey),
		detail: fmt.Sprintf("too many writes: at most %d per %s for each caller; retry after the time in Retry-After", l.Requests, l.Window)}
	wl.rl = httprate.NewRateLimiter(l.Requests, l.Window,
		httprate.WithKeyFuncs(callerKey),
		httprate.WithLimitHandler(func(w http.ResponseWriter, r *http.Request) {
			// httprate has set Retry-After (the window, in seconds) and
			// X-RateLimit-Remaining.
			response.Refuse(w)
			response.WriteProblem(w, http.StatusTooManyRequests, batchLimitDetail(w, r, l, wl.detail), "")
		}))
	return wl
}

// limit spends a write of the caller's, or the request's increment (a
// batch's posts), before h; beyond the limit it answers 429.
func (wl *writeLimiter) limit(h http.Handler) http.Handler {
	if wl == nil {
		return h
	}
	return wl.rl.Handler(h)
}

// refuseSpent answers 429, as limit does, a request whose caller has no
// write left, without spending one, and passes the others on: a route that
// learns its cost only from its body refuses a spent caller before reading.
func (wl *writeLimiter) refuseSpent(next http.Handler) http.Handler {
	if wl == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := wl.keyOf(r)
		if err == nil {
			// As the limiter rounds the sliding window's rate.
			if _, rate, err := wl.rl.Status(key); err == nil && int(math.Round(rate))+1 > wl.l.Requests {
				w.Header().Set("X-RateLimit-Limit", strconv.Itoa(wl.l.Requests))
				w.Header().Set("X-RateLimit-Remaining", "0")
				w.Header().Set("Retry-After", strconv.Itoa(int(wl.l.Window.Seconds())))
				response.Refuse(w)
				response.WriteProblem(w, http.StatusTooManyRequests, wl.detail, "")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// charge is the reservation.Charge of request r, answered through w: it
// spends n writes of r's caller, at most the whole limit (a series denser
// than the limit spends a whole window rather than never passing), or
// returns a 429 requestError when fewer are left. The limiter sets
// X-RateLimit-Remaining and, on a refusal, Retry-After.
func (wl *writeLimiter) charge(w http.ResponseWriter, r *http.Request) reservation.Charge {
	return func(n int) error {
		n = max(1, min(n, wl.l.Requests))
		key, err := wl.keyOf(r)
		if err != nil {
			return fmt.Errorf("write limit key: %w", err)
		}
		if !wl.rl.OnLimit(w, r.WithContext(httprate.WithIncrement(r.Context(), n)), key) {
			return nil
		}
		response.Refuse(w)
		return &requestError{status: http.StatusTooManyRequests, detail: fmt.Sprintf(
			"too many writes: a series spends one write per occurrence within its horizon (at most %d), and this one's %d are more than the %s writes left of at most %d per %s for this caller; nothing was written; retry after the time in Retry-After",
			wl.l.Requests, n, w.Header().Get("X-RateLimit-Remaining"), wl.l.Requests, wl.l.Window)}
	}
}

// callerKey is the limiter's key: the token's subject, or the client's IP
// (of the connection: a forwarded-for header is the client's to forge).
func callerKey(r *http.Request) (string, error) {
	if c, ok := auth.CallerFrom(r.Context()); ok {
		return "sub:" + c.Subject, nil
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + httprate.CanonicalizeIP(host), nil
}
