package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/auth"
	"github.com/postingsvc/posting/auth/authtest"
	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/internal/logtest"
)

// jwksJSON is a JWK Set of key's public half under kid with the given use,
// plus a member "padding" of pad bytes that jwkset ignores: an answer as
// large as wanted that is still a valid key set.
func jwksJSON(t *testing.T, key *rsa.PrivateKey, kid string, use jwkset.USE, pad int) []byte {
	t.Helper()
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{
		Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgRS256, USE: use}})
	require.NoError(t, err)
	body, err := json.Marshal(map[string]any{"padding": strings.Repeat("a", pad), "keys": []any{jwk.Marshal()}})
	require.NoError(t, err)
	return body
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return key
}

// serveJWKS serves body; with chunked, without a Content-Length, so the
// client learns its size only by reading it.
func serveJWKS(t *testing.T, body []byte, chunked bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if chunked {
			for i := 0; i < len(body); i += 64 << 10 {
				_, _ = w.Write(body[i:min(i+64<<10, len(body))])
				w.(http.Flusher).Flush()
			}
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A key set answer over MaxJWKSBytes is refused (its keys verify nothing)
// and logged, whether its size is announced or only found by reading; the
// same set under the bound is accepted.
func TestJWKSAnswerOverTheCapIsRefusedAndLogged(t *testing.T) {
	t.Parallel()
	key := rsaKey(t)
	tok := signWithKID(t, key, "big")
	for name, c := range map[string]struct {
		pad     int
		chunked bool
		refused bool
	}{
		"under the cap":                {pad: auth.MaxJWKSBytes - 4096, refused: false},
		"over the cap, Content-Length": {pad: 2 * auth.MaxJWKSBytes, refused: true},
		"over the cap, chunked":        {pad: 2 * auth.MaxJWKSBytes, chunked: true, refused: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var logs logtest.Buffer
			url := serveJWKS(t, jwksJSON(t, key, "big", jwkset.UseSig, c.pad), c.chunked)
			v := newVerifier(t, auth.Config{JWKSURL: url, JWKSUnknownKIDWait: time.Hour,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			_, err := v.Verify(context.Background(), tok)
			if !c.refused {
				require.NoError(t, err)
				require.NotContains(t, logs.String(), "jwks fetch failed")
				return
			}
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.Contains(t, err.Error(), "no key matches its kid")
			require.Contains(t, logs.String(), "jwks fetch failed")
			require.Contains(t, logs.String(), "jwks answer too large")
		})
	}
}

// An endless answer is read only up to the cap: the verifier hangs up, and
// the server gets to write little more than the cap (plus what the sockets
// buffer), not the 64 MiB it would write to a reader without a bound.
func TestJWKSEndlessAnswerIsCutAtTheCap(t *testing.T) {
	t.Parallel()
	const serverLimit = 64 << 20
	var written atomic.Int64
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer close(done)
		w.Header().Set("Content-Type", "application/json")
		chunk := []byte(strings.Repeat("a", 32<<10))
		_, _ = w.Write([]byte(`{"keys":[],"padding":"`))
		for written.Load() < serverLimit {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	var logs logtest.Buffer
	newVerifier(t, auth.Config{JWKSURL: srv.URL, JWKSTimeout: 5 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the verifier still reads the endless answer")
	}
	require.Less(t, written.Load(), int64(serverLimit/2), "read without a bound")
	require.Contains(t, logs.String(), "jwks answer too large")
}

// A key the set marks for encryption (use "enc") verifies nothing, with or
// without a kid in the token; the same key marked "sig", or unmarked, does.
func TestJWKSEncryptionKeysAreIgnored(t *testing.T) {
	t.Parallel()
	key := rsaKey(t)
	noKID, err := jwt.NewWithClaims(jwt.SigningMethodRS256, valid("alice")).SignedString(key)
	require.NoError(t, err)
	for use, accepted := range map[jwkset.USE]bool{jwkset.UseEnc: false, jwkset.UseSig: true, "": true} {
		t.Run("use "+string(use), func(t *testing.T) {
			t.Parallel()
			url := serveJWKS(t, jwksJSON(t, key, "k1", use, 0), false)
			v := newVerifier(t, auth.Config{JWKSURL: url, JWKSUnknownKIDWait: time.Hour})
			for _, tok := range []string{signWithKID(t, key, "k1"), noKID} {
				c, err := v.Verify(context.Background(), tok)
				if accepted {
					require.NoError(t, err)
					require.Equal(t, "alice", c.Subject)
					continue
				}
				require.ErrorIs(t, err, auth.ErrUnauthorized)
			}
		})
	}
}

// The JWKS URL must be https, except to a loopback host.
func TestJWKSURLMustBeHTTPSUnlessLoopback(t *testing.T) {
	t.Parallel()
	for url, ok := range map[string]bool{
		"https://idp.example/keys":        true,
		"http://127.0.0.1:8443/keys":      true,
		"http://127.1.2.3/keys":           true,
		"http://localhost:9000/keys":      true,
		"http://[::1]:9000/keys":          true,
		"http://idp.example/keys":         false,
		"http://10.0.0.5/keys":            false,
		"http://localhost.evil.example/x": false,
		"http://[::ffff:10.0.0.1]/keys":   false,
	} {
		err := auth.Config{JWKSURL: url}.Validate()
		if ok {
			require.NoError(t, err, url)
			continue
		}
		var ce *config.Error
		require.True(t, errors.As(err, &ce), "%s: %v", url, err)
		require.Equal(t, "auth.Config.JWKSURL", ce.Field, url)
		require.Contains(t, ce.Err.Error(), "must be https", url)
	}
}

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

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A redirect does not take the key set fetch where its URL could not: an
// answer pointing at http:// on another host is not followed (the keys
// would travel in clear), and is logged; a redirect to https, or to http on
// a loopback host, is followed as before.
func TestJWKSRedirectMustBeHTTPSUnlessLoopback(t *testing.T) {
	t.Parallel()
	key := rsaKey(t)
	body := jwksJSON(t, key, "k1", jwkset.UseSig, 0)
	for target, followed := range map[string]bool{
		"http://idp.example/keys":  false,
		"http://10.0.0.5/keys":     false,
		"https://idp.example/keys": true,
		"http://127.0.0.1/keys":    true,
	} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			var asked atomic.Int64
			// The configured URL (a loopback host) redirects to target;
			// the transport answers target itself with the key set.
			client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: r,
					Body: io.NopCloser(strings.NewReader(string(body)))}
				if r.URL.Path == "/start" {
					resp.StatusCode = http.StatusFound
					resp.Header.Set("Location", target)
					resp.Body = http.NoBody
					return resp, nil
				}
				asked.Add(1)
				return resp, nil
			})}
			var logs logtest.Buffer
			v := newVerifier(t, auth.Config{JWKSURL: "http://127.0.0.1/start", HTTPClient: client,
				JWKSUnknownKIDWait: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			_, err := v.Verify(context.Background(), signWithKID(t, key, "k1"))
			if followed {
				require.NoError(t, err)
				require.EqualValues(t, 1, asked.Load())
				return
			}
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.Zero(t, asked.Load(), "the redirect to %s was followed", target)
			require.Contains(t, logs.String(), "jwks fetch failed")
			require.Contains(t, logs.String(), "must be https")
		})
	}
}
