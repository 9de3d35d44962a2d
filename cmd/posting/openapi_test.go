package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/operate/overdue/overduetest"
	"github.com/postingsvc/posting/internal/platform/nodetest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/openapi"
)

const oaAdminToken = "openapi-test-admin-token-32-bytes"

// loadOpenAPI loads and validates the served document as an OpenAPI 3.1
// document (kin-openapi validates 3.1 schemas with JSON Schema 2020-12).
func loadOpenAPI(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.Document())
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "version %s", doc.OpenAPI)
	require.NoError(t, doc.Validate(loader.Context))
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return doc, router
}

// oaHandler is serve's handler (httpHandler) on db, with an admin token and
// the given readiness checks.
func oaHandler(t *testing.T, db *database.DB, history *admin.History, ready ...api.Check) http.Handler {
	t.Helper()
	posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	h, err := httpHandler(admin.Config{DB: db.DB, Token: oaAdminToken, History: history}, metrics.New(db.DB, "openapi-test"), oaAsyncAPI(t),
		api.Config{Posts: posts, Logger: slog.New(slog.DiscardHandler), Ready: ready})
	require.NoError(t, err)
	return h
}

// TestOpenAPIDocumentsEveryRoute walks the patterns serve's router
// registers and requires each to be an operation of the document, and each
// operation of the document to be a registered route.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	h := oaHandler(t, databasetest.NewSQLite(t), nil)
	patterns := api.Patterns(h)
	require.Contains(t, patterns, "GET /admin/outbox/stats", "the admin routes are mounted with a token")
	require.Contains(t, patterns, "GET /openapi.json")

	routed := map[string]bool{}
	for _, p := range patterns {
		method, route, ok := strings.Cut(p, " ")
		require.True(t, ok, "pattern %q has no method: every route is method-specific", p)
		// net/http's "{$}" is "this path exactly", which is what an OpenAPI
		// path means anyway.
		route = strings.TrimSuffix(route, "{$}")
		routed[method+" "+route] = true
		item := doc.Paths.Value(route)
		require.NotNil(t, item, "route %q is not a path of openapi.json", p)
		require.NotNil(t, item.GetOperation(method), "route %q has no %s operation in openapi.json", p, method)
	}
	for route, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			require.True(t, routed[method+" "+route], "openapi.json documents %s %s, which the router does not have", method, route)
		}
	}
}

// oaFixture sends requests to serve's handler and validates each answer
// against the document.
type oaFixture struct {
	doc    *openapi3.T
	router routers.Router
	h      http.Handler
	header http.Header // added to every request
}

// exchange sends one request, requires the status want, validates the
// response (and, for a 2xx, the request) against the document, and returns
// the body. auth is "admin" for the admin token, another non-empty string for
// that bearer token, "" for none.
func (f *oaFixture) exchange(t *testing.T, method, target, contentType, body, auth string, want int) []byte {
	t.Helper()
	newReq := func() *http.Request {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		maps.Copy(r.Header, f.header)
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		switch auth {
		case "":
		case "admin":
			r.Header.Set("Authorization", "Bearer "+oaAdminToken)
		default:
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		return r
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, newReq())
	require.Equal(t, want, rec.Code, "%s %s: %s", method, target, rec.Body.String())

	req := newReq()
	route, params, err := f.router.FindRoute(req)
	switch {
	case errors.Is(err, routers.ErrMethodNotAllowed):
		// An undocumented method of a documented path: the document has no
		// operation to hold the answer, so check it against the 405
		// response every such request gets.
		require.Equal(t, http.StatusMethodNotAllowed, want)
		route = f.fallback(req, want, "MethodNotAllowed")
	case errors.Is(err, routers.ErrPathNotFound):
		require.Equal(t, http.StatusNotFound, want)
		route = f.fallback(req, want, "NotFound")
	default:
		require.NoError(t, err, "%s %s", method, target)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
	if want < 300 && route.Operation.OperationID != "" {
		require.NoError(t, openapi3filter.ValidateRequest(context.Background(), in), "request %s %s", method, target)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(rec.Body.Bytes())
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out),
		"%s %s answered %d %s", method, target, rec.Code, rec.Body.String())
	return rec.Body.Bytes()
}

// fallback is an operation with one response of the document's components.
func (f *oaFixture) fallback(req *http.Request, status int, response string) *routers.Route {
	ref := f.doc.Components.Responses[response]
	return &routers.Route{Spec: f.doc, Path: req.URL.Path, Method: req.Method,
		Operation: &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(status, ref))}}
}

// TestOpenAPIResponses validates real answers of every kind, success and
// error, against the document.
func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	doc, router := loadOpenAPI(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		history, err := admin.NewHistory(admin.HistoryConfig{DB: db.DB})
		require.NoError(t, err)
		f := &oaFixture{doc: doc, router: router, h: oaHandler(t, db, history)}
		const js = "application/json"
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		create := func(title string) int64 {
			var p api.PostJSON
			body := f.exchange(t, "POST", "/api/v1/posts", js,
				`{"title":"`+title+`","content":"c","scheduledAt":"`+future+`"}`, "", http.StatusCreated)
			require.NoError(t, json.Unmarshal(body, &p))
			return p.ID
		}
		a, b, c := create("a"), create("b"), create("c")
		posts := "/api/v1/posts/"
		id := func(n int64) string { return strconv.FormatInt(n, 10) }

		// Posts: success.
		f.exchange(t, "GET", posts+id(a), "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/api/v1/posts?limit=2&order=id&status=RESERVED", "", "", "", http.StatusOK)
		f.exchange(t, "PATCH", posts+id(b), js, `{"title":"b2"}`, "", http.StatusOK)
		f.exchange(t, "POST", posts+id(c)+"/cancel", "", "", "", http.StatusOK)
		// Posts: errors.
		f.exchange(t, "POST", posts+id(c)+"/cancel", "", "", "", http.StatusConflict)
		f.exchange(t, "PATCH", posts+id(c), js, `{"content":"x"}`, "", http.StatusConflict)
		f.exchange(t, "GET", posts+"999999", "", "", "", http.StatusNotFound)
		f.exchange(t, "GET", posts+"abc", "", "", "", http.StatusBadRequest)
		f.exchange(t, "GET", "/api/v1/posts?limit=0", "", "", "", http.StatusBadRequest)
		f.exchange(t, "POST", "/api/v1/posts", js, `{"title":`, "", http.StatusBadRequest)
		f.exchange(t, "POST", "/api/v1/posts", js, `{"title":"t","content":"c","scheduledAt":"`+future+`","extra":1}`, "", http.StatusBadRequest)
		f.exchange(t, "POST", "/api/v1/posts", js, `{"title":"`+strings.Repeat("x", api.MaxBodyBytes)+`"}`, "", http.StatusRequestEntityTooLarge)
		f.exchange(t, "POST", "/api/v1/posts", "text/plain", `{}`, "", http.StatusUnsupportedMediaType)
		f.exchange(t, "DELETE", posts+id(a), "", "", "", http.StatusMethodNotAllowed)
		f.exchange(t, "GET", "/api/v2/nothing", "", "", "", http.StatusNotFound)

		// Health and documents.
		f.exchange(t, "GET", "/healthz", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/readyz", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/metrics", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/openapi.json", "", "", "", http.StatusOK)
		down := &oaFixture{doc: doc, router: router, h: oaHandler(t, db, nil,
			api.Check{Name: "broker", Fn: func(context.Context) error { return errors.New("down") }})}
		down.exchange(t, "GET", "/readyz", "", "", "", http.StatusServiceUnavailable)

		// Admin: b's first event FAIL holds its UPDATED event; c's FAIL
		// is discarded below.
		rows := func(post int64) []outbox.Entry {
			var es []outbox.Entry
			require.NoError(t, db.Where("aggregate_id = ?", post).Order("id").Find(&es).Error)
			return es
		}
		bRows, cRows := rows(b), rows(c)
		require.Len(t, bRows, 2)
		for _, e := range []outbox.Entry{bRows[0], cRows[0]} {
			require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", e.ID).
				Updates(map[string]any{"status": outbox.StatusFail, "retry_count": 4, "last_error": "rejected"}).Error)
		}
		for range 2 {
			_, err := history.RunOnce(t.Context())
			require.NoError(t, err)
		}
		var stats outbox.Summary
		require.NoError(t, json.Unmarshal(f.exchange(t, "GET", "/admin/outbox/stats", "", "", "admin", http.StatusOK), &stats))
		require.NotEmpty(t, stats.Blocking, "the blocking rows are part of what is validated")
		require.NotNil(t, stats.OldestWaiting)
		f.exchange(t, "GET", "/admin/outbox?status=FAIL&limit=10", "", "", "admin", http.StatusOK)
		f.exchange(t, "GET", "/admin/outbox?status=BOGUS", "", "", "admin", http.StatusBadRequest)
		f.exchange(t, "GET", "/admin/outbox/history", "", "", "admin", http.StatusOK)
		f.exchange(t, "GET", "/admin/posts?limit=5", "", "", "admin", http.StatusOK)
		f.exchange(t, "GET", "/admin/posts?limit=0", "", "", "admin", http.StatusBadRequest)
		f.exchange(t, "POST", "/admin/outbox/"+id(bRows[0].ID)+"/requeue", "", "", "admin", http.StatusOK)
		f.exchange(t, "POST", "/admin/outbox/"+id(bRows[0].ID)+"/requeue", "", "", "admin", http.StatusConflict)
		f.exchange(t, "POST", "/admin/outbox/"+id(cRows[0].ID)+"/discard", "", "", "admin", http.StatusOK)
		f.exchange(t, "POST", "/admin/outbox/999999/requeue", "", "", "admin", http.StatusNotFound)
		f.exchange(t, "POST", "/admin/outbox/x/discard", "", "", "admin", http.StatusBadRequest)
		f.exchange(t, "POST", "/admin/outbox/requeue-failed", "", "", "admin", http.StatusOK)
		f.exchange(t, "POST", "/admin/outbox/purge?olderThan=1h", "", "", "admin", http.StatusOK)
		f.exchange(t, "POST", "/admin/outbox/purge?olderThan=soon", "", "", "admin", http.StatusBadRequest)
		f.exchange(t, "GET", "/admin/publications?status=FAILED", "", "", "admin", http.StatusOK)
		f.exchange(t, "POST", "/admin/publications/999999/retry", "", "", "admin", http.StatusNotFound)
		f.exchange(t, "GET", "/admin/posts/overdue", "", "", "admin", http.StatusOK) // none: an empty list
		seeded := overduetest.Seed(t, db)                                            // one post stuck per reason
		var listed overdue.ListJSON
		require.NoError(t, json.Unmarshal(f.exchange(t, "GET", "/admin/posts/overdue?limit=1000", "", "", "admin", http.StatusOK), &listed))
		require.Len(t, listed.Items, len(seeded.Overdue), "every reason is part of what is validated")
		f.exchange(t, "GET", "/admin/posts/overdue?limit=1001", "", "", "admin", http.StatusBadRequest)
		// Admin: 401 without the token or with a wrong one.
		f.exchange(t, "GET", "/admin/outbox/stats", "", "", "", http.StatusUnauthorized)
		f.exchange(t, "GET", "/admin/posts", "", "", "not-the-token", http.StatusUnauthorized)
		f.exchange(t, "POST", "/admin/outbox/"+id(bRows[0].ID)+"/requeue", "", "", "not-the-token", http.StatusUnauthorized)
		// The console's files.
		f.exchange(t, "GET", "/admin/", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/admin/console.js", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/admin/console.css", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/admin", "", "", "", http.StatusMovedPermanently)
	})
}

// TestOpenAPIValidationCatchesDrift shows the checks above can fail: a post
// without its status, or with a field the document does not have, does not
// validate.
func TestOpenAPIValidationCatchesDrift(t *testing.T) {
	t.Parallel()
	_, router := loadOpenAPI(t)
	good := map[string]any{"id": 1, "title": "t", "content": "c", "status": "RESERVED", "ownerId": "u1",
		"scheduledAt": "2030-01-02T15:04:05Z", "createdAt": "2030-01-01T00:00:00Z",
		"updatedAt": "2030-01-01T00:00:00Z", "publishedAt": nil, "publishBy": nil}
	validate := func(post map[string]any) error {
		req := httptest.NewRequest("GET", "/api/v1/posts/1", nil)
		route, params, err := router.FindRoute(req)
		require.NoError(t, err)
		body, err := json.Marshal(post)
		require.NoError(t, err)
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(body)
		return openapi3filter.ValidateResponse(context.Background(), out)
	}
	require.NoError(t, validate(good))
	without := maps.Clone(good)
	delete(without, "status")
	require.Error(t, validate(without))
	extra := maps.Clone(good)
	extra["secret"] = "x"
	require.Error(t, validate(extra))
	badStatus := maps.Clone(good)
	badStatus["status"] = "DONE"
	require.Error(t, validate(badStatus))
}

// oaAsyncAPI is serve's /asyncapi.json handler for the default topic and
// exchange.
func oaAsyncAPI(t *testing.T) http.Handler {
	t.Helper()
	h, err := asyncAPIRoute(&settings{KafkaTopic: "posting-events", RabbitMQExchange: "posting-events"}, nil)
	require.NoError(t, err)
	return h
}

// The answers of an idempotent create (the first, its replay, another body
// with the key, a bad key) validate against the document, which declares
// the Idempotency-Key header with its rules and the replay header.
func TestOpenAPIIdempotentCreate(t *testing.T) {
	t.Parallel()
	doc, router := loadOpenAPI(t)
	h := oaHandler(t, databasetest.NewSQLite(t), nil)
	const js = "application/json"
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	body := `{"title":"t","content":"c","scheduledAt":"` + future + `"}`
	keyed := func(key string) *oaFixture {
		return &oaFixture{doc: doc, router: router, h: h, header: http.Header{api.IdempotencyKeyHeader: {key}}}
	}

	f := keyed("order-1")
	f.exchange(t, "POST", "/api/v1/posts", js, body, "", http.StatusCreated)
	f.exchange(t, "POST", "/api/v1/posts", js, body, "", http.StatusCreated)
	f.exchange(t, "POST", "/api/v1/posts", js, strings.Replace(body, `"c"`, `"other"`, 1), "", http.StatusUnprocessableEntity)
	keyed(strings.Repeat("k", 256)).exchange(t, "POST", "/api/v1/posts", js, body, "", http.StatusBadRequest)

	op := doc.Paths.Value("/api/v1/posts").Post
	param := op.Parameters.GetByInAndName("header", api.IdempotencyKeyHeader)
	require.NotNil(t, param, "the create declares the Idempotency-Key header")
	require.Error(t, param.Schema.Value.VisitJSON(strings.Repeat("k", 256)), "the schema refuses what the API refuses")
	require.Error(t, param.Schema.Value.VisitJSON("tab\there"))
	require.NoError(t, param.Schema.Value.VisitJSON(strings.Repeat("~", 255)))
	require.NotNil(t, op.Responses.Status(http.StatusCreated).Value.Headers[api.IdempotentReplayedHeader])
}

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
	h, err := httpHandler(admin.Config{DB: db.DB, Token: oaAdminToken}, metrics.New(db.DB, "openapi-refusals"), oaAsyncAPI(t), api.Config{
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

// TestOpenAPIRequestSchemasRefuseWhatTheServerRefuses sends bodies the
// server answers 400 to, and requires the document's request schema to
// refuse each of them too, so that a client generated from /openapi.json
// catches them before sending. Bodies the server accepts must pass the
// schema, so the schema is not merely refusing everything. What no schema
// can say (scheduledAt in the future, at most 365 days ahead) is in the
// descriptions and the README.
func TestOpenAPIRequestSchemasRefuseWhatTheServerRefuses(t *testing.T) {
	t.Parallel()
	_, router := loadOpenAPI(t)
	db := databasetest.NewSQLite(t)
	h := oaHandler(t, db, nil)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	body := func(title, content, scheduledAt string) string {
		b, err := json.Marshal(map[string]string{"title": title, "content": content, "scheduledAt": scheduledAt})
		require.NoError(t, err)
		return string(b)
	}
	// send answers the request's status from the server and the document's
	// verdict on the request.
	send := func(method, target, payload string) (int, string, error) {
		newReq := func() *http.Request {
			r := httptest.NewRequest(method, target, strings.NewReader(payload))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq())
		req := newReq()
		route, params, err := router.FindRoute(req)
		require.NoError(t, err)
		verdict := openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}})
		return rec.Code, rec.Body.String(), verdict
	}

	code, answer, verdict := send("POST", "/api/v1/posts", body("hello", "line one\r\n\tline two", future))
	require.Equal(t, http.StatusCreated, code, answer)
	require.NoError(t, verdict, "a body the server accepts")
	var created api.PostJSON
	require.NoError(t, json.Unmarshal([]byte(answer), &created))
	patch := "/api/v1/posts/" + strconv.FormatInt(created.ID, 10)

	accepted := map[string]string{
		"title of 200 characters":     body(strings.Repeat("é", reservation.MaxTitleLength), "c", future),
		"content of 20000 characters": body("t", strings.Repeat("x", reservation.MaxContentLength), future),
		"title with a BOM, not blank": body("\ufeff", "c", future),
		"scheduledAt with an offset":  body("t", "c", time.Now().Add(time.Hour).In(time.FixedZone("", -9000)).Format("2006-01-02T15:04:05.000-07:00")),
	}
	// ajvCases are the same bodies for ajv, a JavaScript client's
	// validator, with the verdict the server gave.
	type ajvCase struct {
		Name   string          `json:"name"`
		Schema string          `json:"schema"`
		Body   json.RawMessage `json:"body"`
		Accept bool            `json:"-"`
	}
	var ajvCases []ajvCase
	for name, b := range accepted {
		code, answer, verdict := send("POST", "/api/v1/posts", b)
		require.Equal(t, http.StatusCreated, code, "%s: %s", name, answer)
		require.NoError(t, verdict, "%s: the server accepts it", name)
		ajvCases = append(ajvCases, ajvCase{name, "PostCreate", json.RawMessage(b), true})
	}
	var before int64
	require.NoError(t, db.Model(&reservation.Post{}).Count(&before).Error)

	inOneHour := time.Now().Add(time.Hour).In(time.FixedZone("", 3600)).Truncate(time.Second)
	// 23:59:60 UTC of a day ahead: valid RFC 3339 syntax, no instant Go can hold.
	leapSecond := time.Now().UTC().Add(48*time.Hour).Format("2006-01-02") + "T23:59:60Z"
	refused := map[string]struct{ method, target, body string }{
		"empty title":                 {"POST", "/api/v1/posts", body("", "c", future)},
		"blank title":                 {"POST", "/api/v1/posts", body(" \u00a0\u3000", "c", future)},
		"title of 201 characters":     {"POST", "/api/v1/posts", body(strings.Repeat("t", reservation.MaxTitleLength+1), "c", future)},
		"title with a line feed":      {"POST", "/api/v1/posts", body("a\nb", "c", future)},
		"title with a tab":            {"POST", "/api/v1/posts", body("a\tb", "c", future)},
		"title with a C1 control":     {"POST", "/api/v1/posts", body("a\u0085b", "c", future)},
		"title with DEL":              {"POST", "/api/v1/posts", body("a\u007fb", "c", future)},
		"content of 20001 characters": {"POST", "/api/v1/posts", body("t", strings.Repeat("x", reservation.MaxContentLength+1), future)},
		"blank content":               {"POST", "/api/v1/posts", body("t", "\r\n\t ", future)},
		"content with NUL":            {"POST", "/api/v1/posts", body("t", "a\u0000b", future)},
		"content with ESC":            {"POST", "/api/v1/posts", body("t", "a\u001b[2Jb", future)},
		"scheduledAt not a date-time": {"POST", "/api/v1/posts", body("t", "c", "tomorrow")},
		"scheduledAt without a zone":  {"POST", "/api/v1/posts", body("t", "c", "2030-01-02T15:04:05")},
		// ajv-formats' date-time takes these too; the server reads RFC
		// 3339 section 5.6 alone, so the schema's pattern must refuse them.
		"scheduledAt with a space for T":   {"POST", "/api/v1/posts", body("t", "c", strings.Replace(future, "T", " ", 1))},
		"scheduledAt offset with no colon": {"POST", "/api/v1/posts", body("t", "c", inOneHour.Format("2006-01-02T15:04:05-0700"))},
		"scheduledAt offset of hours only": {"POST", "/api/v1/posts", body("t", "c", inOneHour.Format("2006-01-02T15:04:05-07"))},
		"scheduledAt a leap second":        {"POST", "/api/v1/posts", body("t", "c", leapSecond)},
		"PATCH scheduledAt with a space":   {"PATCH", patch, `{"scheduledAt":"` + strings.Replace(future, "T", " ", 1) + `"}`},
		"PATCH scheduledAt a leap second":  {"PATCH", patch, `{"scheduledAt":"` + leapSecond + `"}`},
		"list from a leap second":          {"GET", "/api/v1/posts?scheduledFrom=" + leapSecond, ""},
		"list to with a space for T":       {"GET", "/api/v1/posts?scheduledTo=" + url.QueryEscape(strings.Replace(future, "T", " ", 1)), ""},
		"title a number":                   {"POST", "/api/v1/posts", `{"title":1,"content":"c","scheduledAt":"` + future + `"}`},
		"title null":                       {"POST", "/api/v1/posts", `{"title":null,"content":"c","scheduledAt":"` + future + `"}`},
		"no scheduledAt":                   {"POST", "/api/v1/posts", `{"title":"t","content":"c"}`},
		"unknown field":                    {"POST", "/api/v1/posts", `{"title":"t","content":"c","scheduledAt":"` + future + `","owner":"x"}`},
		"PATCH with no field":              {"PATCH", patch, `{}`},
		"PATCH a blank title":              {"PATCH", patch, `{"title":"  "}`},
		"PATCH content of 20001":           {"PATCH", patch, `{"content":"` + strings.Repeat("x", reservation.MaxContentLength+1) + `"}`},
		"PATCH an unknown field":           {"PATCH", patch, `{"status":"PUBLISHED"}`},
		"post id 0":                        {"GET", "/api/v1/posts/0", ""},
	}
	for name, r := range refused {
		code, answer, verdict := send(r.method, r.target, r.body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, answer)
		require.Error(t, verdict, "%s: the server answers 400 %s, the document's schema accepts it", name, answer)
		if r.body != "" {
			ajvCases = append(ajvCases, ajvCase{name, map[string]string{"POST": "PostCreate", "PATCH": "PostPatch"}[r.method], json.RawMessage(r.body), false})
		}
	}
	var after int64
	require.NoError(t, db.Model(&reservation.Post{}).Count(&after).Error)
	require.Equal(t, before, after, "a refused request writes nothing")

	// ajv reads the patterns as ECMAScript regular expressions, kin-openapi
	// as Go's: both must reach the server's verdicts.
	t.Run("ajv", func(t *testing.T) {
		dir := t.TempDir()
		docFile, casesFile := filepath.Join(dir, "openapi.json"), filepath.Join(dir, "cases.json")
		require.NoError(t, os.WriteFile(docFile, openapi.Document(), 0o600))
		raw, err := json.Marshal(ajvCases)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(casesFile, raw, 0o600))
		res := nodetest.Run(t, time.Minute, nil, "thirdparty/ajv-requests.js", docFile, casesFile)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		var verdicts []bool
		require.NoError(t, json.Unmarshal([]byte(res.Stdout), &verdicts), res.Stdout)
		require.Len(t, verdicts, len(ajvCases))
		for i, c := range ajvCases {
			require.Equal(t, c.Accept, verdicts[i], "ajv on %s (%s): the server's verdict is accept=%v", c.Name, c.Schema, c.Accept)
		}
	})
}
