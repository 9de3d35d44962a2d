package auth_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/auth"
	"github.com/postingsvc/posting/auth/authtest"
)

// The fetch an unknown kid causes spends the rate limiter's one token for
// everybody. A caller that goes away while it runs (a client timeout, or an
// attacker who sends a token with the new kid and hangs up) used to cancel
// it, so the rotated key was not loaded and every valid token with the new
// kid was refused until the limiter's next token (30s by default), or the
// hourly refresh if someone repeated the trick. The fetch now finishes
// (bounded by JWKSTimeout) whoever asked for it.
func TestUnknownKIDFetchOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	jwks := authtest.NewJWKS(t)
	var gate atomic.Bool
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gate.Load() {
			arrived <- struct{}{}
			<-release
		}
		resp, err := http.Get(jwks.URL)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(proxy.Close)
	v := newVerifier(t, auth.Config{JWKSURL: proxy.URL, JWKSUnknownKIDWait: time.Hour})
	_, err := v.Verify(context.Background(), jwks.Sign(t, valid("alice")))
	require.NoError(t, err)

	jwks.Rotate(t)
	gate.Store(true)
	rotated := jwks.Sign(t, valid("bob"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = v.Verify(ctx, rotated) // the caller that hangs up
	}()
	<-arrived
	cancel()
	close(release)
	<-done
	gate.Store(false)

	c, err := v.Verify(context.Background(), rotated)
	require.NoError(t, err, "the rotated key was fetched once and is cached")
	require.Equal(t, "bob", c.Subject)
}
