package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/response"
)

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

func loadPost(t *testing.T, db *gorm.DB, id string) reservation.Post {
	t.Helper()
	return databasetest.Load[reservation.Post](t, db, id)
}
