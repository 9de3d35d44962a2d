package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// published is a Publisher that remembers the posts it published.
type published struct {
	mu  sync.Mutex
	ids []int64
}

func (p *published) Publish(_ context.Context, pub worker.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, pub.Post.ID)
	return nil
}

func (p *published) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// The wiring of serve, in one process, with an in-memory span exporter: a
// POST with an upstream traceparent, the scheduler, the relay to the
// in-process broker, and the worker consuming it. One trace runs from the
// HTTP server span to the worker's publication of the post: the request's
// outbox append and the worker's handling of the CREATED event; the
// scheduler's "reserve post" span, a child of the request (the post stores
// its traceparent) linked to the scheduler run, whose context the
// reservation event's row and Kafka record carry; the worker's handling of
// the reservation and the "publish post" span. The scheduler run and the
// relay's polls are traces of their own, linked to it.
func TestTraceFromRequestThroughKafkaToWorker(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		exp := tracetest.NewInMemoryExporter()
		tracing, err := telemetry.Setup(ctx, telemetry.Config{Exporter: exp})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tracing.Shutdown(context.Background()) })
		tp := tracing.TracerProvider()
		b := kafkatest.Start(t)

		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		h, err := api.NewHandler(api.Config{Posts: svc, Logger: quiet(), TracerProvider: tp})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)

		// The caller's own trace: the service continues it.
		const upstreamTrace, upstreamSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		due := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
		body := fmt.Sprintf(`{"title":"t","content":"c","scheduledAt":%q}`, due.Format(time.RFC3339))
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/posts", bytes.NewBufferString(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("traceparent", "00-"+upstreamTrace+"-"+upstreamSpan+"-01")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var post struct{ ID int64 }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&post))
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)

		sched, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Logger: quiet(), TracerProvider: tp})
		require.NoError(t, err)
		res, err := sched.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Marked)

		producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{b.Addr}, Topic: b.Topic}, quiet())
		require.NoError(t, err)
		t.Cleanup(func() { _ = producer.Close() })
		rel, err := relay.New(outbox.NewStore(db), producer, relay.Config{InstanceID: "trace-test", TracerProvider: tp, Logger: quiet()})
		require.NoError(t, err)
		// One event of a post in flight at a time: two polls.
		for range 2 {
			rres, err := rel.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rres.Claimed)
		}
		_, err = rel.Flush(ctx)
		require.NoError(t, err)

		pub := &published{}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), TracerProvider: tp})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		c, err := kafka.NewConsumer(kafka.ConsumerConfig{Brokers: []string{b.Addr}, GroupID: "trace-test",
			CommitInterval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}, w, quiet())
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		t.Cleanup(c.Stop)
		require.Eventually(t, func() bool { return pub.count() == 1 }, 20*time.Second, 20*time.Millisecond, "post not published")
		// The publication span ends after the publication is recorded.
		require.Eventually(t, func() bool { return len(named(exp.GetSpans(), "publish post")) == 1 }, 5*time.Second, 10*time.Millisecond)

		spans := exp.GetSpans()
		server := one(t, spans, "POST /api/v1/posts")
		require.Equal(t, trace.SpanKindServer, server.SpanKind)
		requestTrace := server.SpanContext.TraceID()
		require.Equal(t, upstreamTrace, requestTrace.String(), "the request did not continue the caller's trace")
		require.Equal(t, upstreamSpan, server.Parent.SpanID().String())
		run := one(t, spans, "reservation run")
		require.NotEqual(t, requestTrace, run.SpanContext.TraceID(), "a scheduler run starts a trace of its own")
		require.False(t, run.Parent.IsValid(), "a scheduler run is a root span")

		// The post stores the request's context; the reservation is its
		// child, linked to the run that made it.
		var stored struct{ Traceparent *string }
		require.NoError(t, db.DB.Table("posts").Select("traceparent").Where("id = ?", post.ID).Take(&stored).Error)
		require.NotNil(t, stored.Traceparent)
		require.Equal(t, traceparent(server.SpanContext), *stored.Traceparent, "the post does not store the request's context")
		reserve := one(t, spans, "reserve post")
		require.Equal(t, requestTrace, reserve.SpanContext.TraceID(), "the reservation left the request's trace")
		require.Equal(t, server.SpanContext.SpanID(), reserve.Parent.SpanID(), "the reservation is not a child of the request")
		require.Len(t, reserve.Links, 1)
		require.Equal(t, run.SpanContext, reserve.Links[0].SpanContext, "the reservation is not linked to its run")

		created := one(t, spans, "outbox append") // the scheduler's AppendMany starts none
		require.Equal(t, server.SpanContext.SpanID(), created.Parent.SpanID(), "append is not a child of the request")

		// The outbox rows and the Kafka records carry those contexts.
		var rows []outbox.Message
		require.NoError(t, db.DB.Order("id").Find(&rows).Error)
		require.Len(t, rows, 2)
		rowOf := map[string]outbox.Message{}
		for _, r := range rows {
			require.NotNil(t, r.Traceparent, "row %d (%s) has no traceparent", r.ID, r.EventType)
			rowOf[r.EventType] = r
		}
		require.Equal(t, traceparent(created.SpanContext), *rowOf[string(event.PostingEvent)].Traceparent)
		require.Equal(t, traceparent(reserve.SpanContext), *rowOf[string(event.ReservationEvent)].Traceparent)
		records := b.Records(t, 2, 10*time.Second)
		require.Len(t, records, 2)
		byType := map[string]kafkatest.Record{}
		for _, r := range records {
			byType[r.Headers[event.HeaderEventType]] = r
		}
		createdHeader := byType[string(event.PostingEvent)].Headers[event.HeaderTraceparent]
		reservedHeader := byType[string(event.ReservationEvent)].Headers[event.HeaderTraceparent]
		require.Equal(t, traceparent(created.SpanContext), createdHeader)
		require.Equal(t, traceparent(reserve.SpanContext), reservedHeader)
		// The chain: request == CREATED record == reservation == publication.
		require.Equal(t, upstreamTrace, traceIDOf(createdHeader), "the CREATED record left the request's trace")
		require.Equal(t, upstreamTrace, traceIDOf(reservedHeader), "the reservation record left the request's trace")

		// The worker continues each: its handling is a child of the
		// record's context, and the publication a child of the handling of
		// the reservation, in the request's trace.
		handledCreated := one(t, spans, "process "+string(event.PostingEvent))
		require.Equal(t, trace.SpanKindConsumer, handledCreated.SpanKind)
		require.Equal(t, requestTrace, handledCreated.SpanContext.TraceID())
		require.Equal(t, created.SpanContext.SpanID(), handledCreated.Parent.SpanID())
		handledReserved := one(t, spans, "process "+string(event.ReservationEvent))
		require.Equal(t, requestTrace, handledReserved.SpanContext.TraceID())
		require.Equal(t, reserve.SpanContext.SpanID(), handledReserved.Parent.SpanID())
		publication := one(t, spans, "publish post")
		require.Equal(t, upstreamTrace, publication.SpanContext.TraceID().String(), "the publication is not in the request's trace")
		require.Equal(t, handledReserved.SpanContext.SpanID(), publication.Parent.SpanID())

		// The relay's poll is a trace of its own: claim and send, the send
		// linked to both events' contexts.
		polls, claims, sends := named(spans, "relay poll"), named(spans, "outbox claim"), named(spans, "outbox send")
		require.Len(t, polls, 2)
		require.Len(t, claims, 2)
		require.Len(t, sends, 2)
		linked := map[string]bool{}
		for i, poll := range polls {
			require.False(t, poll.Parent.IsValid(), "a poll is a root span")
			require.Equal(t, poll.SpanContext.SpanID(), claims[i].Parent.SpanID())
			require.Equal(t, poll.SpanContext.SpanID(), sends[i].Parent.SpanID())
			require.Equal(t, trace.SpanKindProducer, sends[i].SpanKind)
			require.Len(t, sends[i].Links, 1)
			linked[traceparent(sends[i].Links[0].SpanContext)] = true
		}
		require.True(t, linked[traceparent(created.SpanContext)], "send not linked to the request's event")
		require.True(t, linked[traceparent(reserve.SpanContext)], "send not linked to the reservation event")
	})
}

// traceIDOf is the trace id of a traceparent, "" when it is none.
func traceIDOf(tp string) string {
	sc := trace.SpanContextFromContext(telemetry.WithTraceparent(context.Background(), tp))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := named(spans, name)
	require.Len(t, got, 1, "spans named %q", name)
	return got[0]
}

func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// With nothing exported (no tracer provider: no otelhttp, no-op spans) the
// trace context still travels: an incoming traceparent is stored with the
// post and its outbox row as it came, a request without one gets a fresh,
// unsampled trace id; each reservation event carries its post's traceparent
// as it is, and a post without one (made before migration 00008) the
// scheduler run's fresh trace id.
func TestWithoutExporterRowsCarryTheTraceContext(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		h, err := api.NewHandler(api.Config{Posts: svc, Logger: quiet()})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		due := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
		post := func(traceparent string) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/posts",
				bytes.NewBufferString(fmt.Sprintf(`{"title":"t","content":"c","scheduledAt":%q}`, due)))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			if traceparent != "" {
				req.Header.Set("traceparent", traceparent)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
		}
		const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		post(incoming)
		post("")
		post("00-zz-broken-01") // not a traceparent: a fresh trace instead
		post(incoming)
		// The last post as one made before migration 00008: no traceparent.
		require.NoError(t, db.DB.Exec("UPDATE posts SET traceparent = NULL WHERE id = (SELECT MAX(id) FROM (SELECT id FROM posts) AS p)").Error)
		sched, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Logger: quiet()})
		require.NoError(t, err)
		res, err := sched.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 4, res.Marked)

		var posts []reservation.Post
		require.NoError(t, db.DB.Order("id").Find(&posts).Error)
		require.Len(t, posts, 4)
		var rows []outbox.Message
		require.NoError(t, db.DB.Order("id").Find(&rows).Error)
		require.Len(t, rows, 8) // 4 CREATED, then 4 reservations in post order (one scheduledAt)
		tps := make([]string, len(rows))
		for i, r := range rows {
			require.NotNil(t, r.Traceparent, "row %d (%s) has no traceparent", r.ID, r.EventType)
			tps[i] = *r.Traceparent
			require.True(t, telemetry.ValidTraceparent(tps[i]), "row %d: %q", r.ID, tps[i])
		}
		require.Equal(t, incoming, tps[0], "the incoming traceparent is stored as it came")
		require.True(t, strings.HasSuffix(tps[1], "-00"), "a fresh trace context is not sampled: %s", tps[1])
		require.NotEqual(t, tps[1][3:35], tps[2][3:35], "two requests share a trace id")
		require.NotContains(t, tps[2], "zz")
		for i, p := range posts[:3] {
			require.NotNil(t, p.Traceparent, "post %d stores no traceparent", p.ID)
			require.Equal(t, tps[i], *p.Traceparent, "post %d and its CREATED row differ", p.ID)
			require.Equal(t, *p.Traceparent, tps[4+i], "the reservation of post %d is not in its request's trace", p.ID)
		}
		// The post without a traceparent: the run's fresh trace, new to
		// every request's.
		require.Nil(t, posts[3].Traceparent)
		for _, tp := range tps[:3] {
			require.NotEqual(t, tp[3:35], tps[7][3:35])
		}
	})
}
