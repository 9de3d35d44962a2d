package reservation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// Two requests' traceparents, of different traces.
const (
	requestA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	requestB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

func requestContext(tp string) context.Context {
	return telemetry.WithTraceparent(context.Background(), tp)
}

// A post stores the trace context of the request that created it, and an
// edit replaces it with its own (an edit outside any trace clears it); the
// post's events are in those traces too.
func TestServiceStoresTheRequestsTraceparent(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		p, err := e.svc.Create(requestContext(requestA), reservation.CreateInput{
			Title: "t", Content: "c", ScheduledAt: svcStart.Add(24 * time.Hour)})
		require.NoError(t, err)
		require.Equal(t, requestA, *p.Traceparent)
		require.Equal(t, requestA, *e.load(t, p.ID).Traceparent)

		got, err := e.svc.Update(requestContext(requestB), p.ID, reservation.UpdateInput{Title: new("second")})
		require.NoError(t, err)
		require.Equal(t, requestB, *got.Traceparent)
		require.Equal(t, requestB, *e.load(t, p.ID).Traceparent)

		_, err = e.svc.Update(context.Background(), p.ID, reservation.UpdateInput{Title: new("third")})
		require.NoError(t, err)
		require.Nil(t, e.load(t, p.ID).Traceparent, "an edit outside any trace kept the previous request's")

		evs := e.events(t, p.ID)
		require.Len(t, evs, 3)
		require.Equal(t, requestA, *evs[0].Traceparent) // the no-op tracer keeps the context
		require.Equal(t, requestB, *evs[1].Traceparent)
		require.Nil(t, evs[2].Traceparent)
	})
}

// While spans record, each reservation event is a "reserve post" span, a
// child of its post's request and linked to the scheduler run, and the
// event's row carries that span's context; a post without a traceparent
// (made before migration 00008) gets the run's context. One batch holds
// posts of three traces.
func TestSchedulerPutsEachReservationInItsPostsTrace(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		b := setupScheduler(t, db.DB)
		posts := b.insert(t, time.Minute, 2*time.Minute, 3*time.Minute)
		for i, tp := range []string{requestA, requestB} {
			require.NoError(t, db.DB.Model(&reservation.Post{}).Where("id = ?", posts[i].ID).Update("traceparent", tp).Error)
		}
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Lead: 5 * time.Minute,
			Now: b.clock.Now, Logger: quietLogger(), TracerProvider: tp})
		require.NoError(t, err)
		res, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 3, res.Marked)

		spans := exp.GetSpans()
		var run tracetest.SpanStub
		reserves := map[trace.TraceID]tracetest.SpanStub{}
		for _, sp := range spans {
			switch sp.Name {
			case "reservation run":
				run = sp
			case "reserve post":
				reserves[sp.SpanContext.TraceID()] = sp
			}
		}
		require.True(t, run.SpanContext.IsValid(), "no run span")
		require.Len(t, reserves, 2, "one reserve span per post with a traceparent")
		events := b.events(t)
		for i, want := range []string{requestA, requestB} {
			parent := trace.SpanContextFromContext(requestContext(want))
			sp, ok := reserves[parent.TraceID()]
			require.True(t, ok, "no reserve span in the trace of post %d", posts[i].ID)
			require.Equal(t, parent.SpanID(), sp.Parent.SpanID(), "reserve span of post %d is not the request's child", posts[i].ID)
			require.Len(t, sp.Links, 1)
			require.Equal(t, run.SpanContext, sp.Links[0].SpanContext)
			require.Len(t, events[posts[i].ID], 1)
			got := events[posts[i].ID][0].Traceparent
			require.NotNil(t, got)
			require.Equal(t, telemetry.Traceparent(trace.ContextWithSpanContext(context.Background(), sp.SpanContext)), *got)
		}
		require.Len(t, events[posts[2].ID], 1)
		got := events[posts[2].ID][0].Traceparent
		require.NotNil(t, got)
		require.Equal(t, telemetry.Traceparent(trace.ContextWithSpanContext(context.Background(), run.SpanContext)), *got,
			"a post without a traceparent: not the run's context")
	})
}
