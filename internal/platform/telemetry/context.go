package telemetry

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traceparent is the W3C traceparent of ctx's span context
// ("00-<trace id>-<span id>-<flags>", 55 characters), or "" when ctx has no
// valid span context. The tracestate, if any, is not carried.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	// As propagation.TraceContext writes it (version 00, the sampled flag
	// only), without its fmt.Sprintf.
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + (sc.TraceFlags() & trace.FlagsSampled).String()
}

// ValidTraceparent reports whether tp is a W3C traceparent of version 00 as
// Traceparent writes it: "00-<32 lower-case hex, not all zero>-<16 lower-case
// hex, not all zero>-<2 hex>", 55 characters, the width of the traceparent
// columns.
func ValidTraceparent(tp string) bool {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	if _, err := trace.TraceIDFromHex(tp[3:35]); err != nil {
		return false
	}
	if _, err := trace.SpanIDFromHex(tp[36:52]); err != nil {
		return false
	}
	_, err := hex.DecodeString(tp[53:])
	return err == nil
}

// WithTraceparent returns ctx with the remote span context of traceparent,
// the parent of the spans started from it. An empty or invalid traceparent
// leaves ctx as it is: a message from an older producer, or with a broken
// header, is processed all the same, in a trace of its own.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, traceparentCarrier(traceparent))
}

// EnsureTrace returns ctx as it is when it has a valid span context, and
// otherwise ctx with a fresh one: random trace and span ids, not sampled.
// Work that starts a trace (an HTTP request without a traceparent, a
// scheduler run) calls it after starting its span, so that the outbox rows it
// writes carry a trace id even when the no-op provider made no span: a
// consumer can still tell which events one request or run wrote, and a
// downstream tracer continues that trace. It costs two random numbers and
// no allocation beyond the context.
func EnsureTrace(ctx context.Context) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
}

// traceparentCarrier is a read-only carrier of the traceparent header
// alone, without a map.
type traceparentCarrier string

func (c traceparentCarrier) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}

func (traceparentCarrier) Set(string, string) {}

func (c traceparentCarrier) Keys() []string { return []string{"traceparent"} }
