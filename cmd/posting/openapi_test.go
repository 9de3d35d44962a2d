package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/admin"
	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/metrics"
	"github.com/postingsvc/posting/openapi"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
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
	h, err := httpHandler(db.DB, metrics.New(db.DB, "openapi-test"), oaAdminToken, history, oaAsyncAPI(t),
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
		"updatedAt": "2030-01-01T00:00:00Z", "publishedAt": nil}
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
