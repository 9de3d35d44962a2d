package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

func TestNewHandlerConfig(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for name, cfg := range map[string]api.Config{
		"no service":            {},
		"negative timeout":      {Posts: svc, ReadyTimeout: -time.Second},
		"check without name":    {Posts: svc, Ready: []api.Check{{Fn: db.Ping}}},
		"check without fn":      {Posts: svc, Ready: []api.Check{{Name: "db"}}},
		"route without handler": {Posts: svc, Routes: map[string]http.Handler{"GET /metrics": nil}},
		"route of the API":      {Posts: svc, Routes: map[string]http.Handler{"GET /healthz": ok}},
		"clashing route":        {Posts: svc, Routes: map[string]http.Handler{"GET /api/v1/posts/{name}": ok}},
		"invalid pattern":       {Posts: svc, Routes: map[string]http.Handler{"GET /{a}/{a}": ok}},
	} {
		h, err := api.NewHandler(cfg)
		require.ErrorContains(t, err, "invalid api config", name)
		require.Nil(t, h, name)
	}
}

func TestExtraRoutes(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	e := apiSetup(t, db, func(cfg *api.Config) {
		cfg.Routes = map[string]http.Handler{
			"GET /metrics": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				_, _ = w.Write([]byte("posting_up 1\n"))
			}),
			"/admin/": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
			}),
		}
	})
	resp, body := e.do(t, http.MethodGet, "/metrics", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "posting_up 1\n", string(body))
	resp, body = e.do(t, http.MethodGet, "/admin/outbox/stats", "", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a mounted route answers for itself")
	require.Equal(t, "unauthorized\n", string(body))
	resp, body = e.do(t, http.MethodPost, "/metrics", "", "")
	requireProblem(t, resp, body, http.StatusMethodNotAllowed)
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	e := apiSetup(t, db, nil)
	resp, body := e.do(t, http.MethodGet, "/healthz", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"status":"ok"}`, string(body))
	resp, body = e.do(t, http.MethodGet, "/readyz", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.JSONEq(t, `{"status":"ready","checks":{"database":"ok"}}`, string(body))

	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	failing := apiSetup(t, db, func(cfg *api.Config) {
		cfg.ReadyTimeout = 50 * time.Millisecond
		cfg.Ready = append(cfg.Ready,
			api.Check{Name: "broker", Fn: func(context.Context) error { return errors.New("dial tcp 10.1.2.3:9092: refused") }},
			// Ignores its context: the answer must not wait for it.
			api.Check{Name: "stuck", Fn: func(context.Context) error { <-release; return nil }},
			api.Check{Name: "slow", Fn: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		)
	})
	resp, body = failing.do(t, http.MethodGet, "/readyz", "", "")
	p := requireProblem(t, resp, body, http.StatusServiceUnavailable)
	require.Contains(t, p.Detail, "broker")
	require.Contains(t, p.Detail, "stuck")
	require.Contains(t, p.Detail, "slow")
	require.NotContains(t, p.Detail, "database")
	require.NotContains(t, p.Detail, "10.1.2.3", "check errors are logged, not shown")
	require.Contains(t, failing.logs.String(), "10.1.2.3")
	// The process is still alive.
	resp, _ = failing.do(t, http.MethodGet, "/healthz", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// HealthRoutes, the probes of a process without the API, checks its
// checks as NewHandler does.
func TestHealthRoutesConfig(t *testing.T) {
	t.Parallel()
	_, err := api.HealthRoutes([]api.Check{{Name: "database"}}, 0, nil)
	require.ErrorContains(t, err, "readiness check 0 needs a Name and an Fn")
	_, err = api.HealthRoutes(nil, -time.Second, nil)
	require.ErrorContains(t, err, "ReadyTimeout must be positive")
	routes, err := api.HealthRoutes(nil, 0, nil)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"GET /healthz", "GET /readyz"}, slices.Collect(maps.Keys(routes)))
}

// TestInternalErrorsAreHidden: a failure of the database or a panic is a bare
// 500 problem; the cause goes to the log only.
func TestInternalErrorsAreHidden(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		e := apiSetup(t, db, func(cfg *api.Config) {
			cfg.Routes = map[string]http.Handler{
				"GET /panic": http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("secret panic value") }),
			}
		})
		id := idOf(t, e.createPost(t, "post"))
		var fail atomic.Bool
		fail.Store(true)
		databasetest.Fail(t, db.DB, databasetest.StmtQuery, errors.New("secret_table: connection lost"),
			func(*gorm.DB) bool { return fail.Load() })
		for _, path := range []string{"/api/v1/posts/" + id, "/api/v1/posts", "/panic"} {
			resp, body := e.do(t, http.MethodGet, path, "", "")
			p := requireProblem(t, resp, body, http.StatusInternalServerError)
			require.Equal(t, "internal server error", p.Detail)
			require.NotContains(t, string(body), "secret")
		}
		resp, body := e.do(t, http.MethodPatch, "/api/v1/posts/"+id, "application/json", `{"title":"x"}`)
		requireProblem(t, resp, body, http.StatusInternalServerError)
		require.NotContains(t, string(body), "secret")
		logs := e.logs.String()
		require.Contains(t, logs, "secret_table: connection lost")
		require.Contains(t, logs, "secret panic value")
		fail.Store(false)
		require.Equal(t, "post", loadPost(t, db.DB, id).Title)
	})
}

func TestPublishedAtIsShownWhenSet(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	e := apiSetup(t, db, nil)
	id := idOf(t, e.createPost(t, "post"))
	at := time.Date(2030, 1, 3, 0, 0, 0, 1000, time.FixedZone("x", 3600))
	require.NoError(t, db.Exec("UPDATE posts SET status = 'PUBLISHED', published_at = ? WHERE id = ?", at.UTC(), id).Error)
	resp, body := e.do(t, http.MethodGet, "/api/v1/posts/"+id, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	post := decodeObject(t, body)
	require.Equal(t, "PUBLISHED", post["status"])
	require.Equal(t, "2030-01-02T23:00:00.000001Z", post["publishedAt"])
	require.True(t, strings.HasSuffix(post["scheduledAt"].(string), "Z"))
}

// The write limit is one budget per caller across every write route, as
// Config.WriteLimit says: a caller that spent it on creates cannot go on
// writing through PATCH and cancel, each of which used to have a limiter
// (and a budget) of its own.
func TestWriteLimitSharedAcrossRoutes(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), func(c *api.Config) {
		c.Auth = verifier(t, testSecret, "")
		c.WriteLimit = api.WriteLimit{Requests: 2, Window: time.Hour}
	})
	alice := tokenFor(t, "alice")
	id := idOf(t, e.createAs(t, alice))
	e.createAs(t, alice)
	posts0, rows0 := counts(t, e.db.DB)
	resp, body := e.doAs(t, alice, http.MethodPatch, "/api/v1/posts/"+id, `{"title":"x"}`)
	requireProblem(t, resp, body, http.StatusTooManyRequests)
	resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/posts/"+id+"/cancel", "")
	requireProblem(t, resp, body, http.StatusTooManyRequests)
	posts, rows := counts(t, e.db.DB)
	require.Equal(t, posts0, posts)
	require.Equal(t, rows0, rows, "a 429 writes nothing")
	post := loadPost(t, e.db.DB, id)
	require.Equal(t, "t", post.Title)
	require.EqualValues(t, "RESERVED", post.Status)
}

// testNow is the service clock in API tests.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// apiEnv is a running API on a test database.
type apiEnv struct {
	db   *database.DB
	svc  *reservation.Service
	srv  *httptest.Server
	logs *logtest.Buffer
}

// apiSetup starts the API on db; edit may change the config first.
func apiSetup(t *testing.T, db *database.DB, edit func(*api.Config)) *apiEnv {
	t.Helper()
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{Now: func() time.Time { return testNow }})
	require.NoError(t, err)
	logs := &logtest.Buffer{}
	cfg := api.Config{
		Posts:  svc,
		Ready:  []api.Check{{Name: "database", Fn: db.Ping}},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := api.NewHandler(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &apiEnv{db: db, svc: svc, srv: srv, logs: logs}
}

// eachAPI runs fn in parallel on an API of each dialect's database.
func eachAPI(t *testing.T, fn func(t *testing.T, e *apiEnv)) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		fn(t, apiSetup(t, db, nil))
	})
}

// eachAPIWithAuth is eachAPI with callers authenticated by tokens of
// testSecret (tokenFor).
func eachAPIWithAuth(t *testing.T, fn func(t *testing.T, e *apiEnv)) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		fn(t, apiSetup(t, db, func(c *api.Config) { c.Auth = verifier(t, testSecret, "") }))
	})
}

// do sends a request; contentType "" sends none.
func (e *apiEnv) do(t *testing.T, method, path, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return e.doHeaders(t, method, path, body, h)
}

// doHeaders sends a request with the header h and returns the response and
// its body.
func (e *apiEnv) doHeaders(t *testing.T, method, path, body string, h http.Header) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, data
}

// createPost creates a post through the API and returns its JSON.
func (e *apiEnv) createPost(t *testing.T, title string) map[string]any {
	t.Helper()
	resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
		`{"title":`+quote(title)+`,"content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	return decodeObject(t, body)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func decodeObject(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), string(body))
	return m
}

// idOf is the id of a post JSON object, as the path spells it.
func idOf(t *testing.T, post map[string]any) string {
	t.Helper()
	id, ok := post["id"].(float64)
	require.True(t, ok, "id is a number: %v", post["id"])
	return strconv.FormatInt(int64(id), 10)
}

// requireProblem checks that a response is an RFC 9457 problem with status
// and returns it.
func requireProblem(t *testing.T, resp *http.Response, body []byte, status int) response.Problem {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, string(body))
	require.Equal(t, response.ProblemContentType, resp.Header.Get("Content-Type"), string(body))
	var p response.Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), string(body))
	require.Equal(t, "about:blank", p.Type)
	require.Equal(t, http.StatusText(status), p.Title)
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Detail)
	return p
}

// counts returns the numbers of posts and outbox rows.
func counts(t *testing.T, db *gorm.DB) (posts, rows int64) {
	t.Helper()
	require.NoError(t, db.Model(&reservation.Post{}).Count(&posts).Error)
	require.NoError(t, db.Model(&outbox.Message{}).Count(&rows).Error)
	return posts, rows
}

// writesNothing notes the numbers of posts and outbox rows and returns a
// check that refused requests since have changed neither.
func writesNothing(t *testing.T, db *gorm.DB) func() {
	t.Helper()
	posts, rows := counts(t, db)
	return func() {
		t.Helper()
		postsAfter, rowsAfter := counts(t, db)
		require.Equal(t, posts, postsAfter, "posts written by refused requests")
		require.Equal(t, rows, rowsAfter, "outbox rows written by refused requests")
	}
}

func loadPost(t *testing.T, db *gorm.DB, id string) reservation.Post {
	t.Helper()
	return databasetest.Load[reservation.Post](t, db, id)
}

// A 404 at the root or under /admin says where to look: the API's routes
// in /openapi.json, and which setting turns the admin endpoints and the
// console on while they are off.
func TestNotFoundSaysWhatTurnsTheConsoleOn(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	off := apiSetup(t, db, nil)
	for path, says := range map[string]string{
		"/":             "/openapi.json",
		"/admin/":       "POSTING_ADMIN_TOKEN",
		"/admin":        "POSTING_ADMIN_TOKEN",
		"/admin/outbox": "POSTING_ADMIN_TOKEN",
	} {
		resp, body := off.do(t, http.MethodGet, path, "", "")
		p := requireProblem(t, resp, body, http.StatusNotFound)
		require.Contains(t, p.Detail, says, path)
	}
	on := apiSetup(t, db, func(c *api.Config) {
		c.Routes = map[string]http.Handler{"GET /admin/{$}": http.NotFoundHandler()}
	})
	resp, body := on.do(t, http.MethodGet, "/admin/nothing-here", "", "")
	p := requireProblem(t, resp, body, http.StatusNotFound)
	require.NotContains(t, p.Detail, "POSTING_ADMIN_TOKEN", "the console is on")
}
