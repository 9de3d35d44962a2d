package admin_test

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// authEnv serves the admin routes with the default failure limit, keeping
// their log lines and the outcomes they counted.
type authEnv struct {
	mux  *http.ServeMux
	logs *logtest.Buffer

	mu       sync.Mutex
	outcomes map[string]int
}

func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	e := &authEnv{mux: http.NewServeMux(), logs: &logtest.Buffer{}, outcomes: map[string]int{}}
	routes, err := admin.Routes(admin.Config{DB: databasetest.NewSQLite(t).DB, Token: token,
		Logger:             slog.New(slog.NewTextHandler(e.logs, nil)),
		ObserveAuthFailure: func(o string) { e.mu.Lock(); e.outcomes[o]++; e.mu.Unlock() }})
	require.NoError(t, err)
	for pattern, h := range routes {
		e.mux.Handle(pattern, h)
	}
	return e
}

// send sends a GET of path from remoteAddr (host:port) with the
// Authorization header auth, if any.
func (e *authEnv) send(remoteAddr, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remoteAddr
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	e.mux.ServeHTTP(rec, req)
	return rec
}

func (e *authEnv) counted() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.outcomes)
}

// A source address that failed to authenticate 5 times in a minute gets
// 429 problem+json with Retry-After, even with the right token, while other
// sources are served; each refusal is an audit line with the source, the
// route and the outcome, never the token, and is counted by outcome.
func TestFailedAdminAuthenticationsAreLimitedPerSource(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	logs := e.logs
	send := func(source, auth string) *httptest.ResponseRecorder {
		return e.send(source+":40000", "/admin/outbox/stats", auth)
	}
	const guess = "Bearer guess-guess-guess-guess-guess-guess"
	require.Equal(t, http.StatusUnauthorized, send("192.0.2.9", "").Code)
	for i := range admin.DefaultAuthFailures - 1 {
		rec := send("192.0.2.9", fmt.Sprint(guess, i))
		require.Equal(t, http.StatusUnauthorized, rec.Code)
		require.Equal(t, "close", rec.Header().Get("Connection"))
	}
	rec := send("192.0.2.9", "Bearer "+token)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "the right token too, once the source is blocked")
	require.Equal(t, response.ProblemContentType, rec.Header().Get("Content-Type"))
	require.Equal(t, "60", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "too many failed admin authentications")
	require.Equal(t, http.StatusOK, send("192.0.2.10", "Bearer "+token).Code, "another source is served")

	require.Contains(t, logs.String(), `msg=audit component=admin action=auth.refused source=192.0.2.9 route="GET /admin/outbox/stats" outcome=missing`)
	require.Contains(t, logs.String(), `action=auth.refused source=192.0.2.9 route="GET /admin/outbox/stats" outcome=invalid`)
	require.Contains(t, logs.String(), `action=auth.refused source=192.0.2.9 route="GET /admin/outbox/stats" outcome=limited`)
	require.NotContains(t, logs.String(), "guess-guess")
	require.NotContains(t, logs.String(), token)
	require.Equal(t, map[string]int{admin.AuthMissing: 1, admin.AuthInvalid: 4, admin.AuthLimited: 1}, e.counted())
}

// A token shorter than 32 bytes is refused, naming the field, never
// showing the token.
func TestShortAdminTokenRefused(t *testing.T) {
	t.Parallel()
	short := strings.Repeat("a", admin.MinTokenBytes-1)
	_, err := admin.Routes(admin.Config{DB: databasetest.NewSQLite(t).DB, Token: short})
	var ce *config.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "admin.Config.Token", ce.Field)
	require.NotContains(t, err.Error(), short)
}

// One host holds a whole IPv6 /64 (SLAAC, privacy addresses), so the
// failure limit counts a /64 as one source: a guesser that takes a new
// address of its prefix for each guess is still blocked after 5, while
// another /64 is served. IPv4-mapped addresses count as their IPv4 one.
func TestFailedAdminAuthenticationsCountAnIPv6PrefixAsOneSource(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	send := func(remoteAddr, auth string) int { return e.send(remoteAddr, "/admin/outbox/stats", auth).Code }
	const guess = "Bearer guess-guess-guess-guess-guess-guess"
	for i := range admin.DefaultAuthFailures {
		require.Equal(t, http.StatusUnauthorized, send(fmt.Sprintf("[2001:db8:1:2::%x]:40000", i+1), fmt.Sprint(guess, i)))
	}
	require.Equal(t, http.StatusTooManyRequests, send("[2001:db8:1:2:ffff:ffff:ffff:ffff]:40000", "Bearer "+token),
		"another address of the same /64")
	require.Equal(t, http.StatusOK, send("[2001:db8:1:3::1]:40000", "Bearer "+token), "another /64 is served")
	require.Contains(t, e.logs.String(), "source=2001:db8:1:2::/64")

	for i := range admin.DefaultAuthFailures {
		require.Equal(t, http.StatusUnauthorized, send("[::ffff:198.51.100.7]:40000", fmt.Sprint(guess, i)))
	}
	require.Equal(t, http.StatusTooManyRequests, send("198.51.100.7:40000", "Bearer "+token),
		"an IPv4-mapped address is its IPv4 address")
}

// The console signs in by sending its six first requests at once with the
// token typed; a mistyped token is one wrong guess, not six, so the
// operator who types it again correctly is served, not locked out for a
// minute. Every refusal is still an audit line and counted.
func TestARepeatedWrongAdminTokenCountsAsOneFailure(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	send := func(path, auth string) int { return e.send("192.0.2.20:40000", path, auth).Code }
	// The console's first requests (internal/operate/admin/console/console.js, load()).
	signIn := []string{"/admin/outbox/stats", "/admin/outbox/history", "/admin/outbox?status=FAIL&limit=200",
		"/admin/outbox?status=PENDING&limit=1000", "/admin/outbox?status=RETRY&limit=1000", "/admin/posts?limit=20"}
	for _, path := range signIn {
		require.Equal(t, http.StatusUnauthorized, send(path, "Bearer "+token+"x"), path)
	}
	for _, path := range signIn {
		require.Equal(t, http.StatusOK, send(path, "Bearer "+token), path)
	}
	require.Equal(t, map[string]int{admin.AuthInvalid: len(signIn)}, e.counted())
	require.Equal(t, len(signIn), strings.Count(e.logs.String(), "outcome=invalid"))

	// Distinct wrong tokens are distinct guesses and still limited.
	for i := range admin.DefaultAuthFailures - 1 {
		require.Equal(t, http.StatusUnauthorized, send(signIn[0], fmt.Sprintf("Bearer guess-%d", i)))
	}
	require.Equal(t, http.StatusTooManyRequests, send(signIn[0], "Bearer "+token))
}

// A blocked source that keeps sending is answered 429 every time and each
// refusal is counted, but only its first is an audit line in the window: a
// flood of refused requests must not become a flood of log lines.
func TestABlockedSourceIsLoggedOncePerWindow(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	send := func(auth string) int { return e.send("192.0.2.30:40000", "/admin/outbox/stats", auth).Code }
	for i := range admin.DefaultAuthFailures {
		require.Equal(t, http.StatusUnauthorized, send(fmt.Sprintf("Bearer guess-%d", i)))
	}
	const flood = 50
	for i := range flood {
		require.Equal(t, http.StatusTooManyRequests, send(fmt.Sprintf("Bearer guess-after-%d", i)))
	}
	require.Equal(t, 1, strings.Count(e.logs.String(), "outcome=limited"), e.logs.String())
	require.Equal(t, flood, e.counted()[admin.AuthLimited])
}
