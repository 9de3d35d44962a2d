package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/auth"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/metrics"
	"github.com/postingsvc/posting/reservation"
)

// TestOpenAPIDocumentsEveryRefusal requires each operation to list the
// answers any route can give (405 with Allow, 431, 500), and validates real
// refusals against the operation they came from: 429 with Retry-After from
// the write limit on create, PATCH and cancel, 403 for ownerId without the
// admin scope, 405 on every path, 431 from the HTTP server.
func TestOpenAPIDocumentsEveryRefusal(t *testing.T) {
	t.Parallel()
	doc, router := loadOpenAPI(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for _, status := range []int{http.StatusMethodNotAllowed, http.StatusRequestHeaderFieldsTooLarge, http.StatusInternalServerError} {
				require.NotNil(t, op.Responses.Status(status), "%s %s does not document %d", method, path, status)
			}
		}
	}

	db := databasetest.NewSQLite(t)
	secret := []byte("openapi-refusals-secret-of-32-bytes!")
	v, err := auth.New(auth.Config{Secret: secret})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	h, err := httpHandler(db.DB, metrics.New(db.DB, "openapi-refusals"), oaAdminToken, nil, oaAsyncAPI(t), api.Config{
		Posts: posts, Logger: slog.New(slog.DiscardHandler), Auth: v,
		WriteLimit: api.WriteLimit{Requests: 2, Window: time.Hour}})
	require.NoError(t, err)
	f := &oaFixture{doc: doc, router: router, h: h}
	token := func(sub string) string {
		s, err := auth.Mint(secret, auth.Token{Subject: sub, TTL: time.Hour})
		require.NoError(t, err)
		return s
	}
	const js = "application/json"
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	create := `{"title":"t","content":"c","scheduledAt":"` + future + `"}`

	// 403: a caller without posts:admin filters by owner.
	f.exchange(t, "GET", "/api/v1/posts?ownerId=someone", "", "", token("u1"), http.StatusForbidden)
	// 429: each caller's third write, whichever route, answers 429.
	for _, w := range []struct{ method, target, contentType, body string }{
		{"POST", "/api/v1/posts", js, create},
		{"PATCH", "/api/v1/posts/1", js, `{"title":"x"}`},
		{"POST", "/api/v1/posts/1/cancel", "", ""},
	} {
		caller := token("writer-" + w.method + w.target)
		f.exchange(t, "POST", "/api/v1/posts", js, create, caller, http.StatusCreated)
		f.exchange(t, "POST", "/api/v1/posts", js, create, caller, http.StatusCreated)
		f.exchange(t, w.method, w.target, w.contentType, w.body, caller, http.StatusTooManyRequests)
	}
	// 405 on every path, with Allow.
	for path, item := range doc.Paths.Map() {
		target := strings.ReplaceAll(path, "{id}", "1")
		method := "DELETE"
		if item.Delete != nil {
			method = "PUT"
		}
		f.exchange(t, method, target, "", "", "", http.StatusMethodNotAllowed)
	}

	// 431 comes from net/http's server, before any handler: serve runs
	// its handler in one with the default header limit (1 MiB).
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	// A raw connection: the server answers and closes while the client is
	// still writing, which net/http's client reports as a write error.
	conn, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	go func() {
		_, _ = io.WriteString(conn, "GET /api/v1/posts HTTP/1.1\r\nHost: x\r\nX-Padding: "+
			strings.Repeat("x", http.DefaultMaxHeaderBytes+8192)+"\r\n\r\n")
	}()
	req := httptest.NewRequest("GET", "/api/v1/posts", nil)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	route, params, err := router.FindRoute(req)
	require.NoError(t, err)
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode, Header: resp.Header, Body: resp.Body,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out))
}
