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
func guard(cfg Config, h http.Handler, limit func(http.Handler) http.Handler) http.Handler {
	h = scoped(h)
	if limit != nil {
		h = limit(h)
	}
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
// whichever route they use. refuseSpent answers 429, as the limiter does,
// a request whose caller has no write left, without spending one, and
// passes the others on: a route that must read its body before the limit
// can count it refuses a spent caller before reading.
func writeLimiter(l WriteLimit) (limit, refuseSpent func(http.Handler) http.Handler) {
	detail := fmt.Sprintf("too many writes: at most %d per %s for each caller; retry after the time in Retry-After", l.Requests, l.Window)
	rl := httprate.NewRateLimiter(l.Requests, l.Window,
		httprate.WithKeyFuncs(callerKey),
		httprate.WithLimitHandler(func(w http.ResponseWriter, r *http.Request) {
			// httprate has set Retry-After (the window, in seconds) and
			// X-RateLimit-Remaining.
			response.Refuse(w)
			response.WriteProblem(w, http.StatusTooManyRequests, batchLimitDetail(w, r, l, detail), "")
		}))
	keyOf := httprate.JoinKeys(callerKey) // the key the limiter makes of it
	refuseSpent = func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := keyOf(r)
			if err == nil {
				// As the limiter rounds the sliding window's rate.
				if _, rate, err := rl.Status(key); err == nil && int(math.Round(rate))+1 > l.Requests {
					w.Header().Set("X-RateLimit-Limit", strconv.Itoa(l.Requests))
					w.Header().Set("X-RateLimit-Remaining", "0")
					w.Header().Set("Retry-After", strconv.Itoa(int(l.Window.Seconds())))
					response.Refuse(w)
					response.WriteProblem(w, http.StatusTooManyRequests, detail, "")
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
	return rl.Handler, refuseSpent
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
