// Package response holds what the service's HTTP handlers (api, admin,
// metrics) share about writing a response: the RFC 9457 problem+json form of
// every error, and one ResponseWriter wrapper that remembers the status.
// It depends on nothing of the service, so any handler package can use it.
package response

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object. Type is always
// "about:blank": the status code says what kind of problem it is, Title is
// the status text and Detail says what exactly went wrong.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Field names the request field at fault of a 400, as the API spells it
	// (title, content, scheduledAt, id, status, scheduledFrom, scheduledTo,
	// order, limit, cursor, olderThan, after, or an unknown query
	// parameter, ...).
	Field string `json:"field,omitempty"`
}

// WriteProblem writes a problem response with status and detail, and field
// when one request field is at fault.
func WriteProblem(w http.ResponseWriter, status int, detail, field string) {
	body, err := json.Marshal(Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Field:  field,
	})
	if err != nil {
		// A struct of strings and an int always marshals.
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// StatusWriter is a ResponseWriter that remembers the status of the
// response it passes on: for metrics, and to know whether a response has
// started (a handler that panics after that cannot answer 500 any more).
type StatusWriter struct {
	http.ResponseWriter
	status int
}

// Status is the status code written, 200 if the body was written without
// one, and 0 while the response has not started. Informational (1xx)
// headers do not start it.
func (w *StatusWriter) Status() int { return w.status }

// WriteHeader passes the header on and remembers the first final status.
func (w *StatusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write passes b on; a body without a header is a 200.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer (flush,
// deadlines) through the wrapper.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Refuse marks a response that refuses a request without reading its body
// (a failed authentication, a rate limit) to close the connection after it.
// Without it net/http reads a body of up to 256 KiB before it sends the
// answer, to keep the connection for the next request: a client that sends
// its body slowly would get its refusal only when the whole body arrived.
func Refuse(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

type routeKey struct{}

// WithRoute returns ctx with room for the route a request matched, and a
// function that reads it once the request is served. The metrics wrap sets
// it up outside the handler: the handler's own wrappers (tracing) replace
// the request, so the r.Pattern the mux sets is never seen outside, while a
// value in the context is.
func WithRoute(ctx context.Context) (context.Context, func() string) {
	route := new(string)
	return context.WithValue(ctx, routeKey{}, route), func() string { return *route }
}

// RecordRoute records pattern as the route of the request of ctx, if
// WithRoute made room for it.
func RecordRoute(ctx context.Context, pattern string) {
	if route, ok := ctx.Value(routeKey{}).(*string); ok {
		*route = pattern
	}
}

// Routed serves mux and records the pattern each request matches.
func Routed(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		RecordRoute(r.Context(), pattern)
		mux.ServeHTTP(w, r)
	})
}
