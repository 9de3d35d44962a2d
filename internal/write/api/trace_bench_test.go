package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTraced measures what the tracing wrapper adds to one request
// routed by a mux to a handler that does nothing: none (no wrapper), off (no exporter: the
// trace context only, the default), off with an incoming traceparent, and
// exporting (otelhttp with the SDK and a batcher to an exporter that drops
// the spans).
func BenchmarkTraced(b *testing.B) {
	mux := http.NewServeMux()
	noop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Check") != "" && !trace.SpanContextFromContext(r.Context()).IsValid() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("POST /api/v1/posts", noop)
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for _, bc := range []struct {
		name        string
		h           http.Handler
		traceparent string
	}{
		{"none", mux, ""},
		{"off", traced(mux, mux, nil), ""},
		{"off+traceparent", traced(mux, mux, nil), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"exporting", traced(mux, mux, sdk), ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodPost, "/api/v1/posts", nil)
			if bc.traceparent != "" {
				req.Header.Set("traceparent", bc.traceparent)
			}
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				bc.h.ServeHTTP(rec, req)
			}
		})
	}
}
