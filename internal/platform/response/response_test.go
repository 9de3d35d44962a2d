package response_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/response"
)

func TestWriteProblem(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	response.WriteProblem(rec, http.StatusBadRequest, "limit: too big", "limit")
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Equal(t, response.ProblemContentType, rec.Header().Get("Content-Type"))
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	require.Equal(t, rec.Body.Len(), mustAtoi(t, rec.Header().Get("Content-Length")))
	var p response.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, response.Problem{Type: "about:blank", Title: "Bad Request", Status: 400, Detail: "limit: too big", Field: "limit"}, p)
}

func TestStatusWriter(t *testing.T) {
	t.Parallel()
	w := &response.StatusWriter{ResponseWriter: httptest.NewRecorder()}
	require.Zero(t, w.Status(), "not started")
	w.WriteHeader(http.StatusEarlyHints)
	require.Zero(t, w.Status(), "1xx does not start the response")
	w.WriteHeader(http.StatusTeapot)
	w.WriteHeader(http.StatusOK)
	require.Equal(t, http.StatusTeapot, w.Status(), "the first final status counts")

	w = &response.StatusWriter{ResponseWriter: httptest.NewRecorder()}
	_, err := w.Write([]byte("x"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, w.Status(), "a body without a header is a 200")
	require.NotNil(t, w.Unwrap())
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return n
}
