package auth

import (
	"context"
	"net/http"
	"strings"

	"github.com/postingsvc/posting/internal/platform/response"
)

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller Middleware put into ctx, and false when the
// request was not authenticated.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Middleware lets a request through to next only with a valid
// "Authorization: Bearer <JWT>", its Caller in the request's context. Any
// other request is answered 401 problem+json before next runs, so nothing
// is read or written: with "WWW-Authenticate: Bearer" when it carries no
// bearer token, with error="invalid_token" when the token is refused (RFC
// 6750 3). The detail says what was wrong and never repeats the token;
// nothing here logs.
func Middleware(v *Verifier, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, problem := bearerToken(r.Header.Values("Authorization"))
		if problem != "" {
			unauthorized(w, `Bearer`, problem)
			return
		}
		c, err := v.Verify(r.Context(), token)
		if err != nil {
			unauthorized(w, `Bearer error="invalid_token"`, strings.TrimPrefix(err.Error(), ErrUnauthorized.Error()+": "))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
	})
}

func unauthorized(w http.ResponseWriter, challenge, detail string) {
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Cache-Control", "no-store")
	response.Refuse(w)
	response.WriteProblem(w, http.StatusUnauthorized, detail, "")
}

// bearerToken returns the token of the request's one Authorization header,
// or what is wrong with the headers. The scheme is case-insensitive (RFC
// 9110 11.1).
func bearerToken(headers []string) (token, problem string) {
	const need = "an Authorization: Bearer <JWT> header is required"
	switch len(headers) {
	case 0:
		return "", need
	case 1:
	default:
		return "", need + ", once"
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(headers[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", need + "; the header has another scheme"
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", need + "; the header has no token"
	}
	return token, ""
}
