package reservation

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/internal/platform/telemetry"
)

// traceparentOf is the W3C traceparent of ctx's span context, the request
// that creates or edits a post, as the post stores it; nil when ctx has none.
func traceparentOf(ctx context.Context) *string {
	if tp := telemetry.Traceparent(ctx); tp != "" {
		return &tp
	}
	return nil
}

// reservationTrace returns the traceparent of p's reservation event ev, and
// the span to end once the event is written (nil when it started none).
//
// The event belongs to the trace of the request that created or last edited
// p, so that the worker's publication of p lands in that request's trace: ctx
// is the scheduler run's, and while its span records, a "reserve post" span
// is started as a child of p's traceparent, linked to the run, and the event
// carries that span's context. While nothing records (the no-op provider)
// the event carries p's traceparent as it is. A post without one (created
// before migration 00008, or outside any trace) falls back to the run's
// context.
func reservationTrace(ctx context.Context, tracer trace.Tracer, p *Post, eventID string) (string, trace.Span) {
	if p.Traceparent == nil || !telemetry.ValidTraceparent(*p.Traceparent) {
		return telemetry.Traceparent(ctx), nil
	}
	run := trace.SpanFromContext(ctx)
	if !run.IsRecording() {
		return *p.Traceparent, nil
	}
	_, span := tracer.Start(telemetry.WithTraceparent(ctx, *p.Traceparent), "reserve post",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(trace.Link{SpanContext: run.SpanContext()}),
		trace.WithAttributes(attribute.Int64("posting.post_id", p.ID), attribute.String("messaging.message.id", eventID)))
	return telemetry.Traceparent(trace.ContextWithSpanContext(ctx, span.SpanContext())), span
}
