package relay

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/send/outbox"
)

const tracerName = telemetry.ScopeName + "/relay"

// tracePoll starts the span of a poll that claimed msgs, as of start, when
// the claim began, with its finished "outbox claim" child. Polls that claim
// nothing (most of them, on an idle service) make no span: the spans are
// started only once rows were claimed, back-dated to start.
func (r *Relay) tracePoll(ctx context.Context, start time.Time, msgs []outbox.Message) (context.Context, trace.Span) {
	tr := r.cfg.TracerProvider.Tracer(tracerName)
	ctx, poll := tr.Start(ctx, "relay poll", trace.WithTimestamp(start), trace.WithNewRoot())
	if !poll.IsRecording() {
		return ctx, poll
	}
	poll.SetAttributes(attribute.String("posting.instance_id", r.cfg.InstanceID))
	_, claim := tr.Start(ctx, "outbox claim", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.Int("posting.outbox.claimed", len(msgs))))
	claim.End()
	return ctx, poll
}

// traceSend sends msgs in an "outbox send" span (kind producer) linked to the
// trace context of each row: the messages carry those contexts, not this
// span's, so each event's consumer continues the trace of the request or
// run that wrote it.
func (r *Relay) traceSend(ctx context.Context, msgs []outbox.Message) []error {
	ctx, span := r.cfg.TracerProvider.Tracer(tracerName).Start(ctx, "outbox send", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	envs := Envelopes(msgs)
	if !span.IsRecording() {
		return r.send.Send(ctx, envs)
	}
	span.SetAttributes(attribute.Int("messaging.batch.message_count", len(msgs)))
	for _, m := range msgs {
		if m.Traceparent == nil {
			continue
		}
		if sc := trace.SpanContextFromContext(telemetry.WithTraceparent(context.Background(), *m.Traceparent)); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("messaging.message.id", m.EventID)}})
		}
	}
	errs := r.send.Send(ctx, envs)
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed > 0 {
		span.SetAttributes(attribute.Int("posting.outbox.failed", failed))
		span.SetStatus(codes.Error, "some messages were not acknowledged")
	}
	return errs
}

// endSpan ends span, marking it failed with err.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
