package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/postingsvc/posting/auth"
	"github.com/postingsvc/posting/auth/authtest"
)

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
