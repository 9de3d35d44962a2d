package auth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Token is what Mint puts into a token.
type Token struct {
	// Subject is the sub claim: the caller. Required.
	Subject string
	// Scopes become the space-separated scope claim; none: no claim.
	Scopes []string
	// TTL is how long the token is valid from Now. Required, positive.
	TTL time.Duration
	// Issuer and Audience, when set, are the iss and aud claims.
	Issuer, Audience string
	// Now is the iat and nbf of the token. Default time.Now().
	Now time.Time
}

// Mint returns an HS256 JWT for t signed with secret, for trying the API
// out (`posting token`); production tokens come from an identity provider.
func Mint(secret []byte, t Token) (string, error) {
	if len(secret) < MinSecretLength {
		return "", fmt.Errorf("the secret must be at least %d bytes", MinSecretLength)
	}
	if t.Subject == "" {
		return "", errors.New("the subject must not be empty")
	}
	if strings.TrimSpace(t.Subject) != t.Subject {
		return "", errors.New("the subject must not begin or end with white space: Verify refuses it")
	}
	if t.TTL <= 0 {
		return "", fmt.Errorf("the lifetime must be positive, got %s", t.TTL)
	}
	now := t.Now
	if now.IsZero() {
		now = time.Now()
	}
	c := claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   t.Subject,
		Issuer:    t.Issuer,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(t.TTL)),
	}}
	if t.Audience != "" {
		c.Audience = jwt.ClaimStrings{t.Audience}
	}
	type out struct {
		jwt.RegisteredClaims
		Scope string `json:"scope,omitempty"`
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, out{RegisteredClaims: c.RegisteredClaims, Scope: strings.Join(t.Scopes, " ")}).
		SignedString(secret)
}
