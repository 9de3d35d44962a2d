package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
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

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/auth/authtest"
)

var (
	secret = []byte("0123456789abcdef0123456789abcdef")
	now    = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
)

func hs256(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	return hs256Key(t, secret, c)
}

func hs256Key(t *testing.T, key []byte, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	require.NoError(t, err)
	return s
}

func valid(sub string) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "exp": now.Add(time.Hour).Unix(), "iss": "https://idp.example", "aud": "posting"}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for key, val := range c {
		out[key] = val
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func newVerifier(t *testing.T, cfg auth.Config) *auth.Verifier {
	t.Helper()
	cfg.Now = func() time.Time { return now }
	v, err := auth.New(cfg)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return v
}

// Every refusal case of the issue, each refused with a reason that names
// what was wrong and does not contain the token.
func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	jwks := authtest.NewJWKS(t)
	hsOnly := newVerifier(t, auth.Config{Secret: secret, Issuer: "https://idp.example", Audience: "posting"})
	jwksOnly := newVerifier(t, auth.Config{JWKSURL: jwks.URL, Issuer: "https://idp.example", Audience: "posting"})

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pubDER, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	require.NoError(t, err)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, valid("alice")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	rs256, err := jwt.NewWithClaims(jwt.SigningMethodRS256, valid("alice")).SignedString(rsaKey)
	require.NoError(t, err)

	for name, c := range map[string]struct {
		v      *auth.Verifier
		token  string
		reason string
	}{
		"malformed":                   {hsOnly, "not.a.jwt", "not a well-formed JWT"},
		"garbage":                     {hsOnly, "abc", "not a well-formed JWT"},
		"bad signature":               {hsOnly, hs256Key(t, []byte("another-secret-another-secret-xx"), valid("alice")), "signature does not verify"},
		"alg none":                    {hsOnly, none, "alg is not accepted"},
		"alg none, jwks":              {jwksOnly, none, "alg is not accepted"},
		"RS256 to an HS verifier":     {hsOnly, rs256, "alg is not accepted"},
		"HS/RS confusion":             {jwksOnly, hs256Key(t, pubPEM, valid("alice")), "alg is not accepted"},
		"unknown kid":                 {jwksOnly, signWithKID(t, rsaKey, "nope"), "no key matches its kid"},
		"expired":                     {hsOnly, hs256(t, with(valid("alice"), "exp", now.Add(-time.Minute).Unix())), "expired (exp)"},
		"no exp":                      {hsOnly, hs256(t, with(valid("alice"), "exp", nil)), "no exp claim"},
		"nbf in the future":           {hsOnly, hs256(t, with(valid("alice"), "nbf", now.Add(time.Minute).Unix())), "not valid yet (nbf)"},
		"wrong iss":                   {hsOnly, hs256(t, with(valid("alice"), "iss", "https://evil.example")), "issuer (iss)"},
		"no iss":                      {hsOnly, hs256(t, with(valid("alice"), "iss", nil)), "no iss claim"},
		"wrong aud":                   {hsOnly, hs256(t, with(valid("alice"), "aud", "other")), "audience (aud)"},
		"no sub":                      {hsOnly, hs256(t, with(valid("alice"), "sub", nil)), "no sub claim"},
		"sub too long":                {hsOnly, hs256(t, valid(strings.Repeat("a", 256))), "more than 255"},
		"sub with a control char":     {hsOnly, hs256(t, valid("ali\nce")), "control characters"},
		"jwks token, wrong aud":       {jwksOnly, jwks.Sign(t, with(valid("alice"), "aud", "other")), "audience (aud)"},
		"jwks token, expired":         {jwksOnly, jwks.Sign(t, with(valid("alice"), "exp", now.Add(-time.Hour).Unix())), "expired (exp)"},
		"HS token to a JWKS verifier": {jwksOnly, hs256Key(t, secret, valid("alice")), "alg is not accepted"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := c.v.Verify(context.Background(), c.token)
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.Contains(t, err.Error(), c.reason)
			if len(c.token) > 8 {
				require.NotContains(t, err.Error(), c.token)
			}
		})
	}
}

func signWithKID(t *testing.T, key *rsa.PrivateKey, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, valid("alice"))
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// A valid token gives its subject and scopes; the clock leeway lets a
// token expired a few seconds ago through.
func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secret: secret, Issuer: "https://idp.example", Audience: "posting"})
	c, err := v.Verify(context.Background(), hs256(t, with(valid("alice"), "scope", "posts:read posts:admin")))
	require.NoError(t, err)
	require.Equal(t, "alice", c.Subject)
	require.True(t, c.Admin())

	c, err = v.Verify(context.Background(), hs256(t, with(valid("bob"), "exp", now.Add(-10*time.Second).Unix())))
	require.NoError(t, err, "within the 30s leeway")
	require.Equal(t, "bob", c.Subject)
	require.False(t, c.Admin())

	c, err = v.Verify(context.Background(), hs256(t, with(valid("carol"), "scope", []string{"posts:admin"})))
	require.NoError(t, err)
	require.True(t, c.Admin(), "a scope array is read too")

	minted, err := auth.Mint(secret, auth.Token{Subject: "dave", Scopes: []string{auth.AdminScope}, TTL: time.Hour,
		Issuer: "https://idp.example", Audience: "posting", Now: now})
	require.NoError(t, err)
	c, err = v.Verify(context.Background(), minted)
	require.NoError(t, err)
	require.Equal(t, auth.Caller{Subject: "dave", Scopes: []string{auth.AdminScope}}, c)

	_, err = auth.Mint(secret, auth.Token{Subject: "dave ", TTL: time.Hour, Now: now})
	require.ErrorContains(t, err, "white space", "Mint refuses a subject Verify would refuse")
}

// jwksVerifier returns a JWKS provider and a verifier of its tokens, with
// unknownKIDWait between fetches for unknown kids, that has fetched the key
// set and accepted a token of alice signed by its key.
func jwksVerifier(t *testing.T, unknownKIDWait time.Duration) (*authtest.JWKS, *auth.Verifier) {
	t.Helper()
	jwks := authtest.NewJWKS(t)
	v := newVerifier(t, auth.Config{JWKSURL: jwks.URL, JWKSUnknownKIDWait: unknownKIDWait})
	c, err := v.Verify(context.Background(), jwks.Sign(t, valid("alice")))
	require.NoError(t, err)
	require.Equal(t, "alice", c.Subject)
	return jwks, v
}

// A token signed by a key of the JWKS endpoint is accepted; after the
// provider rotates to a new kid, a token with that kid makes the verifier
// fetch the set again (once) and is accepted too.
func TestVerifyJWKSRotation(t *testing.T) {
	t.Parallel()
	jwks, v := jwksVerifier(t, time.Millisecond)
	fetches := jwks.Fetches.Load()

	old := jwks.KID()
	jwks.Rotate(t)
	require.NotEqual(t, old, jwks.KID())
	c, err := v.Verify(context.Background(), jwks.Sign(t, valid("bob")))
	require.NoError(t, err)
	require.Equal(t, "bob", c.Subject)
	require.Equal(t, fetches+1, jwks.Fetches.Load(), "one fetch for the unknown kid")

	// The cached set now holds the new key: no fetch for the next token.
	_, err = v.Verify(context.Background(), jwks.Sign(t, valid("carol")))
	require.NoError(t, err)
	require.Equal(t, fetches+1, jwks.Fetches.Load())
}

// Unknown kids are rate-limited: a flood of them costs the provider one
// fetch per interval, and each is refused without waiting for the next.
func TestVerifyUnknownKIDRateLimited(t *testing.T) {
	t.Parallel()
	jwks, v := jwksVerifier(t, time.Hour)
	base := jwks.Fetches.Load()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	for range 5 {
		_, err := v.Verify(context.Background(), signWithKID(t, key, "unknown"))
		require.ErrorIs(t, err, auth.ErrUnauthorized)
	}
	require.LessOrEqual(t, jwks.Fetches.Load(), base+1)
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secret: secret})
	var seen []auth.Caller
	h := auth.Middleware(v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := auth.CallerFrom(r.Context())
		require.True(t, ok)
		seen = append(seen, c)
		w.WriteHeader(http.StatusNoContent)
	}))
	good := hs256(t, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()})
	for name, c := range map[string]struct {
		headers   []string
		status    int
		challenge string
	}{
		"no header":      {nil, 401, `Bearer`},
		"basic":          {[]string{"Basic YWxpY2U6eA=="}, 401, `Bearer`},
		"empty bearer":   {[]string{"Bearer "}, 401, `Bearer`},
		"two headers":    {[]string{"Bearer " + good, "Bearer " + good}, 401, `Bearer`},
		"invalid token":  {[]string{"Bearer x.y.z"}, 401, `Bearer error="invalid_token"`},
		"valid":          {[]string{"Bearer " + good}, 204, ""},
		"valid, lowcase": {[]string{"bearer " + good}, 204, ""},
	} {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/posts", nil)
		for _, hv := range c.headers {
			req.Header.Add("Authorization", hv)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, c.status, rec.Code, name)
		require.Equal(t, c.challenge, rec.Header().Get("WWW-Authenticate"), name)
		if c.status == 401 {
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), name)
			require.NotContains(t, rec.Body.String(), good, name)
		}
	}
	require.Len(t, seen, 2)
	require.Equal(t, "alice", seen[0].Subject)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		cfg   auth.Config
		field string
	}{
		"nothing":      {auth.Config{}, "auth.Config.Secret"},
		"short secret": {auth.Config{Secret: []byte("short")}, "auth.Config.Secret"},
		"bad url":      {auth.Config{JWKSURL: "ftp://x"}, "auth.Config.JWKSURL"},
		"relative url": {auth.Config{JWKSURL: "/keys"}, "auth.Config.JWKSURL"},
	} {
		_, err := auth.New(c.cfg)
		var ce *config.Error
		require.True(t, errors.As(err, &ce), name)
		require.Equal(t, c.field, ce.Field, name)
		require.NotContains(t, err.Error(), "short\"", name)
	}
}

// BenchmarkVerify prints the cost of verifying one token: HS256 with the
// secret, RS256 with a cached JWKS key.
func BenchmarkVerify(b *testing.B) {
	claims := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
	b.Run("HS256", func(b *testing.B) {
		v, err := auth.New(auth.Config{Secret: secret})
		if err != nil {
			b.Fatal(err)
		}
		defer v.Close()
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := v.Verify(context.Background(), tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RS256-JWKS", func(b *testing.B) {
		jwks := authtest.NewJWKS(b)
		v, err := auth.New(auth.Config{JWKSURL: jwks.URL})
		if err != nil {
			b.Fatal(err)
		}
		defer v.Close()
		tok := jwks.Sign(b, claims)
		for b.Loop() {
			if _, err := v.Verify(context.Background(), tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

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

// Scope tokens are separated by spaces (0x20) only, as RFC 6749 3.3 says:
// another white space character joins two words into one token, which
// grants nothing.
func TestScopeIsSplitOnSpacesOnly(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secret: secret})
	for scope, want := range map[string][]string{
		"posts:read  posts:admin": {"posts:read", "posts:admin"},
		"x\u00a0posts:admin":      {"x\u00a0posts:admin"},
		"x\tposts:admin":          {"x\tposts:admin"},
		"x\u2003posts:admin y":    {"x\u2003posts:admin", "y"},
		" posts:admin ":           {"posts:admin"},
	} {
		c, err := v.Verify(context.Background(), hs256(t, with(valid("alice"), "scope", scope)))
		require.NoError(t, err, "%q", scope)
		require.Equal(t, want, c.Scopes, "%q", scope)
	}
	c, err := v.Verify(context.Background(), hs256(t, with(valid("alice"), "scope", "x\u00a0posts:admin")))
	require.NoError(t, err)
	require.NotContains(t, c.Scopes, auth.AdminScope)
}

// A token issued in the future beyond the clock leeway is refused; within
// the leeway it passes.
func TestTokenIssuedInTheFutureIsRefused(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secret: secret})
	_, err := v.Verify(context.Background(), hs256(t, with(valid("alice"), "iat", now.Add(auth.DefaultLeeway+time.Minute).Unix())))
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.Contains(t, err.Error(), "issued in the future (iat)")
	_, err = v.Verify(context.Background(), hs256(t, with(valid("alice"), "iat", now.Add(auth.DefaultLeeway/2).Unix())))
	require.NoError(t, err)
}

// A token longer than MaxTokenBytes is refused by its length, and a
// token's signature is checked before its claims are read: a badly signed
// token whose claims are not even JSON is refused for its signature.
func TestTokenLengthAndSignatureAreCheckedBeforeTheClaims(t *testing.T) {
	t.Parallel()
	hs := newVerifier(t, auth.Config{Secret: secret})
	jwks := authtest.NewJWKS(t)
	js := newVerifier(t, auth.Config{JWKSURL: jwks.URL})

	claims := valid("alice")
	for i := 0; len(hs256(t, claims)) <= auth.MaxTokenBytes; i++ {
		claims = with(claims, fmt.Sprintf("c%05d", i), strings.Repeat("x", 200))
	}
	long := hs256(t, claims)
	_, err := hs.Verify(context.Background(), long)
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.Contains(t, err.Error(), fmt.Sprintf("more than %d", auth.MaxTokenBytes))

	enc := base64.RawURLEncoding.EncodeToString
	head := enc([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := enc([]byte(`{"sub":"alice","sub":"mallory",` + strings.Repeat(`"a":1,`, 1000)))
	forged := head + "." + body + "." + enc([]byte("not the signature"))
	_, err = hs.Verify(context.Background(), forged)
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.Contains(t, err.Error(), "signature does not verify")

	rsHead := enc([]byte(`{"alg":"RS256","kid":"` + jwks.KID() + `"}`))
	_, err = js.Verify(context.Background(), rsHead+"."+body+"."+enc(make([]byte, 256)))
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.Contains(t, err.Error(), "signature does not verify")

	// A well-signed token still passes both checks.
	c, err := js.Verify(context.Background(), jwks.Sign(t, valid("alice")))
	require.NoError(t, err)
	require.Equal(t, "alice", c.Subject)
}
