package auth_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/write/auth"
)

// signClaims is an HS256 token over exactly the bytes of payload, as a
// careless or hostile issuer could write them (golang-jwt would re-encode
// them and mend what these tests need broken).
func signClaims(payload []byte) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(payload)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// The claims set is read strictly: a sub of invalid UTF-8 is refused rather
// than stored with U+FFFD, exp, nbf and iat must be JSON numbers, a date past
// any real time says so instead of "expired", and a claim named twice is
// refused; each refusal is a 401 reason naming what was wrong.
func TestVerifyReadsClaimsStrictly(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secret: secret})
	const exp = `"exp":1893557045` // now + 1h
	for name, c := range map[string]struct {
		payload string
		reason  string
	}{
		"sub with a byte of invalid UTF-8": {`{"sub":"bob` + "\xff" + `",` + exp + `}`, "sub is not valid UTF-8"},
		"sub with a lone surrogate":        {`{"sub":"bob\udcff",` + exp + `}`, "sub is not valid UTF-8"},
		"sub not a string":                 {`{"sub":42,` + exp + `}`, "sub is not a string"},
		"exp as a string":                  {`{"sub":"bob","exp":"1893557045"}`, "exp must be a JSON number (seconds since 1970), not a string"},
		"exp null":                         {`{"sub":"bob","exp":null}`, "exp must be a JSON number"},
		"nbf as a string":                  {`{"sub":"bob",` + exp + `,"nbf":"0"}`, "nbf must be a JSON number"},
		"iat as a boolean":                 {`{"sub":"bob",` + exp + `,"iat":true}`, "iat must be a JSON number (seconds since 1970), not a boolean"},
		"exp 2^63-1":                       {`{"sub":"bob","exp":9223372036854775807}`, "exp is beyond any sane time"},
		"exp 1e400":                        {`{"sub":"bob","exp":1e400}`, "exp is beyond any sane time"},
		"exp in year 10000":                {`{"sub":"bob","exp":253402300800}`, "exp is beyond any sane time"},
		"nbf before 1970":                  {`{"sub":"bob",` + exp + `,"nbf":-1}`, "nbf is before 1970"},
		"sub in capitals":                  {`{"SUB":"bob` + "\xff" + `",` + exp + `}`, `claim "SUB": claim names are case-sensitive`},
		"exp with a long s":                {`{"sub":"bob","eXp":1893557045,"ſub":"x"}`, "claim names are case-sensitive"},
		"sub named twice":                  {`{"sub":"alice","sub":"bob",` + exp + `}`, "a claim named twice"},
		"iss with invalid UTF-8":           {`{"sub":"bob","iss":"x` + "\xfe" + `",` + exp + `}`, "invalid UTF-8"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tok := signClaims([]byte(c.payload))
			_, err := v.Verify(context.Background(), tok)
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.Contains(t, err.Error(), c.reason)
			require.NotContains(t, err.Error(), "expired")
		})
	}
	// What stays accepted: a fractional exp, an escaped non-ASCII sub read
	// as the same owner as its literal spelling.
	for payload, sub := range map[string]string{
		`{"sub":"bob",` + exp + `}`:                       "bob",
		`{"sub":"bob","exp":1893557045.5}`:                "bob",
		`{"sub":"b\u00f8b",` + exp + `,"nbf":0,"iat":0}`:  "bøb",
		`{"sub":"bøb",` + exp + `}`:                       "bøb",
		`{"sub":"smile \ud83d\ude00",` + exp + `}`:        "smile 😀",
		`{"sub":"bob",` + exp + `,"scope":"posts:admin"}`: "bob",
	} {
		c, err := v.Verify(context.Background(), signClaims([]byte(payload)))
		require.NoError(t, err, payload)
		require.Equal(t, sub, c.Subject, payload)
	}
}

// FuzzVerifyClaims signs any claims set with the verifier's key: Verify
// must not panic, and a caller it accepts has a sub that is exactly the
// token's (valid UTF-8, read the same by a strict decoder), within the
// length and character rules, from an I-JSON claims set with a numeric exp.
func FuzzVerifyClaims(f *testing.F) {
	for _, seed := range []string{
		`{"sub":"alice","exp":1893557045}`,
		`{"sub":"alice","exp":1893557045,"nbf":1893550000,"iat":1893550000,"iss":"https://idp.example","aud":["posting"],"scope":"posts:admin"}`,
		`{"sub":"bob` + "\xff" + `","exp":1893557045}`,
		`{"sub":"bob\udcff","exp":1893557045}`,
		`{"sub":"bob","exp":"1893557045"}`,
		`{"sub":"bob","exp":9223372036854775807}`,
		`{"sub":"a","sub":"b","exp":1893557045}`,
		`{"sub":" alice","exp":1893557045}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	v, err := auth.New(auth.Config{Secret: secret, Now: func() time.Time { return now }})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(v.Close)
	f.Fuzz(func(t *testing.T, payload []byte) {
		tok := signClaims(payload)
		c, err := v.Verify(context.Background(), tok)
		if err != nil {
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.NotContains(t, err.Error(), tok)
			return
		}
		require.True(t, jsontext.Value(payload).IsValid(), "accepted a claims set that is not I-JSON: %q", payload)
		var strict struct {
			Sub string         `json:"sub"`
			Exp jsontext.Value `json:"exp"`
		}
		require.NoError(t, jsonv2.Unmarshal(payload, &strict, jsonv2.RejectUnknownMembers(false)))
		require.Equal(t, strict.Sub, c.Subject, "the caller is not the token's sub byte for byte")
		require.NotEmpty(t, c.Subject)
		require.True(t, utf8.ValidString(c.Subject))
		require.LessOrEqual(t, utf8.RuneCountInString(c.Subject), auth.MaxSubjectLength)
		require.False(t, strings.ContainsFunc(c.Subject, unicode.IsControl))
		require.Equal(t, strings.TrimSpace(c.Subject), c.Subject)
		require.Equal(t, jsontext.Kind('0'), strict.Exp.Kind(), "accepted an exp that is not a number: %s", strict.Exp)
	})
}

// Over HTTP a strictly refused claims set is a 401 problem+json whose detail
// is the reason, with the invalid_token challenge, and the handler never runs.
func TestMiddlewareAnswersClaimRefusalsWithTheReason(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secret: secret})
	h := auth.Middleware(v, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler ran for a refused token")
	}))
	for payload, reason := range map[string]string{
		`{"sub":"bob` + "\xff" + `","exp":1893557045}`: "the token's sub is not valid UTF-8",
		`{"sub":"bob","exp":"1893557045"}`:             "the token's exp must be a JSON number",
		`{"sub":"bob","exp":9223372036854775807}`:      "the token's exp is beyond any sane time",
	} {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/posts", nil)
		req.Header.Set("Authorization", "Bearer "+signClaims([]byte(payload)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusUnauthorized, rec.Code, payload)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		require.Equal(t, `Bearer error="invalid_token"`, rec.Header().Get("WWW-Authenticate"))
		var problem struct {
			Detail string `json:"detail"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &problem))
		require.Contains(t, problem.Detail, reason, payload)
	}
}
