// Package authtest helps tests of authenticated requests: a JWKS endpoint
// whose signing key can be rotated, and tokens signed with it.
package authtest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// JWKS is an httptest server serving a JWK Set of one RS256 key at a time.
type JWKS struct {
	// URL is the endpoint.
	URL string
	// Fetches counts the requests the endpoint answered.
	Fetches atomic.Int64

	mu  sync.Mutex
	kid string
	key *rsa.PrivateKey
	n   int
}

// NewJWKS starts a JWKS endpoint with a first key, closed at the test's end.
func NewJWKS(t testing.TB) *JWKS {
	t.Helper()
	j := &JWKS{}
	j.Rotate(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.Fetches.Add(1)
		j.mu.Lock()
		kid, key := j.kid, j.key
		j.mu.Unlock()
		jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgRS256, USE: jwkset.UseSig}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		store := jwkset.NewMemoryStorage()
		_ = store.KeyWrite(r.Context(), jwk)
		body, err := store.JSONPublic(context.Background())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	j.URL = srv.URL
	return j
}

// Rotate replaces the served key with a new one under a new kid.
func (j *JWKS) Rotate(t testing.TB) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.n++
	j.kid, j.key = "key-"+strconv.Itoa(j.n), key
}

// KID is the kid of the key served now.
func (j *JWKS) KID() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.kid
}

// Sign signs claims with the key served now, under its kid.
func (j *JWKS) Sign(t testing.TB, claims jwt.Claims) string {
	t.Helper()
	j.mu.Lock()
	kid, key := j.kid, j.key
	j.mu.Unlock()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// PublicKeyPEM is the served public key in PEM: what an attacker would use
// as an HMAC secret in an HS256/RS256 confusion attack.
func (j *JWKS) PublicKeyPEM(t testing.TB) []byte {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	der, err := x509.MarshalPKIXPublicKey(&j.key.PublicKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}
