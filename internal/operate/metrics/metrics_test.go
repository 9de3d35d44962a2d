package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

var t0 = clocktest.T0

// scrape serves one GET /metrics and parses the text format.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	require.NoError(t, err)
	return fams
}

// value returns the value of the sample of name whose labels include want
// (a histogram gives its sample count), failing when there is none.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	fam, ok := fams[name]
	require.True(t, ok, "no metric %s", name)
next:
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		require.Equal(t, "test-1", got["instance_id"], "%s without instance_id", name)
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	require.Failf(t, "no sample", "%s%v", name, want)
	return 0
}

// A known workload through the relay, the sender wrapper, the scheduler
// and worker hooks and the HTTP middleware gives exact counter values, and
// the outbox gauges show the table.
func TestScrapeAfterKnownWorkload(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		scrapeAt := t0.Add(time.Hour)
		m := metrics.New(db.DB, "test-1", metrics.WithClock(func() time.Time { return scrapeAt }))

		// Posts 1-3 are acked, 4-6 rejected: 4 and 5 are retried, 6 had
		// used its retries and fails; 7 was claimed by a dead instance.
		var rows []outbox.Message
		for post := int64(1); post <= 7; post++ {
			rows = append(rows, reservationtest.Append(t, db.DB, post, t0.Add(time.Duration(post)*time.Millisecond)))
		}
		held := reservationtest.Append(t, db.DB, 6, t0.Add(time.Second)) // blocked behind post 6's FAIL
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", rows[5].ID).
			Updates(map[string]any{"status": outbox.StatusRetry, "retry_count": 3}).Error)
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", rows[6].ID).
			Updates(map[string]any{"status": outbox.StatusProcessing, "claimed_by": "dead", "claimed_at": t0.Add(-time.Hour)}).Error)

		send := relaytest.NewSender()
		send.Reject(func(m event.Message) error {
			if m.Key == event.Key(4) || m.Key == event.Key(5) || m.Key == event.Key(6) {
				return errors.New("message too large")
			}
			return nil
		})
		timed := m.WrapSender(send)
		r, err := relay.New(outbox.NewStore(db).WithClock(func() time.Time { return t0.Add(2 * time.Second) }), timed, relay.Config{
			InstanceID: "test-1", Now: func() time.Time { return t0.Add(2 * time.Second) },
		})
		require.NoError(t, err)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		m.ObserveRelay(res, 20*time.Millisecond, err)
		require.Equal(t, relay.Result{Recovered: 1, Claimed: 6, Sent: 3, Retried: 2, Failed: 1}, res)
		// An idle poll and a failed one.
		m.ObserveRelay(relay.Result{}, time.Millisecond, nil)
		m.ObserveRelay(relay.Result{}, time.Millisecond, errors.New("db down"))

		m.ObserveScheduler(2, 1, 0, 5*time.Millisecond, nil)
		m.ObserveScheduler(0, 0, 1, 5*time.Millisecond, errors.New("db down"))
		m.ObservePublication(1500 * time.Millisecond)
		m.ObservePublication(-time.Second)
		m.ObserveConsumed("POSTING_EVENT", "processed")
		m.ObserveConsumed("POSTING_EVENT", "duplicate")
		m.ObserveConsumed("POSTING_RESERVATION_EVENT", "processed")
		m.ObserveConsumed("junk", "malformed")
		m.ObserveConsumed("POSTING_EVENT", "error")
		m.ObserveConsumed("POSTING_RESERVATION_EVENT", "out_of_order")

		mux := http.NewServeMux()
		mux.HandleFunc("GET /things/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("POST /things", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
		h := m.HTTP(response.Routed(mux))
		for _, req := range []struct{ method, path string }{
			{"GET", "/things/1"}, {"GET", "/things/2"}, {"POST", "/things"}, {"GET", "/nowhere"}, {"DELETE", "/things/1"},
		} {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(req.method, req.path, nil))
		}

		f := scrape(t, m.Handler())
		for name, want := range map[string]float64{
			"posting_relay_events_sent_total":        3,
			"posting_relay_events_retried_total":     2,
			"posting_relay_events_failed_total":      1,
			"posting_relay_events_recovered_total":   1,
			"posting_relay_events_released_total":    0,
			"posting_relay_claim_conflicts_total":    0,
			"posting_relay_batch_duration_seconds":   1, // only the poll that claimed
			"posting_broker_send_duration_seconds":   1,
			"posting_worker_publication_lag_seconds": 2,
			"posting_scheduler_run_duration_seconds": 2,
		} {
			require.Equal(t, want, value(t, f, name, nil), name)
		}
		lag := f["posting_worker_publication_lag_seconds"].GetMetric()[0].GetHistogram()
		require.Equal(t, 1.5, lag.GetSampleSum(), "a negative lag counts as 0")
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"posting_relay_polls_total", map[string]string{"result": "ok"}, 2},
			{"posting_relay_polls_total", map[string]string{"result": "error"}, 1},
			{"posting_relay_polls_total", map[string]string{"result": "unavailable"}, 0},
			{"posting_broker_messages_total", map[string]string{"result": "acked"}, 3},
			{"posting_broker_messages_total", map[string]string{"result": "rejected"}, 3},
			{"posting_broker_messages_total", map[string]string{"result": "unavailable"}, 0},
			{"posting_scheduler_runs_total", map[string]string{"result": "ok"}, 1},
			{"posting_scheduler_runs_total", map[string]string{"result": "error"}, 1},
			{"posting_scheduler_posts_total", map[string]string{"result": "marked"}, 2},
			{"posting_scheduler_posts_total", map[string]string{"result": "skipped"}, 1},
			{"posting_scheduler_posts_total", map[string]string{"result": "failed"}, 1},
			{"posting_worker_publications_total", map[string]string{"outcome": "published"}, 2},
			{"posting_worker_publications_total", map[string]string{"outcome": "cancelled"}, 0},
			{"posting_worker_publications_total", map[string]string{"outcome": "failed"}, 0},
			{"posting_worker_events_consumed_total", map[string]string{"event_type": "POSTING_EVENT", "outcome": "processed"}, 1},
			{"posting_worker_events_consumed_total", map[string]string{"event_type": "POSTING_EVENT", "outcome": "duplicate"}, 1},
			{"posting_worker_events_consumed_total", map[string]string{"event_type": "POSTING_RESERVATION_EVENT", "outcome": "processed"}, 1},
			{"posting_worker_events_consumed_total", map[string]string{"event_type": "other", "outcome": "malformed"}, 1},
			{"posting_worker_events_consumed_total", map[string]string{"event_type": "POSTING_EVENT", "outcome": "error"}, 1},
			{"posting_worker_events_consumed_total", map[string]string{"event_type": "POSTING_RESERVATION_EVENT", "outcome": "out_of_order"}, 1},
			{"posting_worker_events_out_of_order_total", map[string]string{"event_type": "POSTING_RESERVATION_EVENT"}, 1},
			{"posting_http_requests_total", map[string]string{"route": "GET /things/{id}", "code": "200"}, 2},
			{"posting_http_requests_total", map[string]string{"route": "POST /things", "code": "201"}, 1},
			{"posting_http_requests_total", map[string]string{"route": "unmatched", "code": "404"}, 1},
			{"posting_http_requests_total", map[string]string{"route": "unmatched", "code": "405"}, 1},
			{"posting_http_request_duration_seconds", map[string]string{"route": "GET /things/{id}", "code": "200"}, 2},
			{"posting_outbox_stats_up", nil, 1},
			{"posting_outbox_rows", map[string]string{"status": "SENT"}, 3},
			{"posting_outbox_rows", map[string]string{"status": "RETRY"}, 3},
			{"posting_outbox_rows", map[string]string{"status": "FAIL"}, 1},
			{"posting_outbox_rows", map[string]string{"status": "PENDING"}, 1},
			{"posting_outbox_rows", map[string]string{"status": "PROCESSING"}, 0},
			{"posting_outbox_discarded_rows", nil, 0},
			{"posting_outbox_blocked_rows", nil, 1},
		} {
			require.Equal(t, c.want, value(t, f, c.name, c.labels), "%s%v", c.name, c.labels)
		}
		require.Len(t, f["posting_http_requests_total"].GetMetric(), 4)
		// The oldest waiting row is post 4's, now RETRY.
		require.InDelta(t, scrapeAt.Sub(rows[3].Created).Seconds(),
			value(t, f, "posting_outbox_oldest_pending_age_seconds", nil), 1e-6)
		require.Equal(t, outbox.StatusPending, statusOfHeld(t, db, held.ID))

		// The Go and process collectors are on.
		value(t, f, "go_goroutines", nil)
		value(t, f, "process_cpu_seconds_total", nil)
	})
}

func statusOfHeld(t *testing.T, db *database.DB, id int64) outbox.Status {
	t.Helper()
	return databasetest.Load[outbox.Message](t, db.DB, id).Status
}

// A database that cannot be read turns posting_outbox_stats_up to 0 and
// leaves the other metrics served.
func TestScrapeWithBrokenDatabase(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	m := metrics.New(db.DB, "test-1", metrics.WithScrapeTimeout(time.Second))
	require.NoError(t, db.Close())
	f := scrape(t, m.Handler())
	require.Equal(t, 0.0, value(t, f, "posting_outbox_stats_up", nil))
	require.NotContains(t, f, "posting_outbox_rows")
	require.Equal(t, 0.0, value(t, f, "posting_relay_events_sent_total", nil))

	// Without a database there are no outbox metrics at all.
	f = scrape(t, metrics.New(nil, "test-1").Handler())
	require.NotContains(t, f, "posting_outbox_stats_up")
	value(t, f, "go_goroutines", nil)
}

// The route label is what the ServeMux matched, also behind a handler that
// replaces the request (as tracing does with WithContext).
func TestHTTPRouteBehindWrapper(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, "test-1")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/outbox/{id}", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	})
	routed := response.Routed(mux)
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { routed.ServeHTTP(w, r.WithContext(r.Context())) })
	m.HTTP(wrapped).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/admin/outbox/3", nil))
	f := scrape(t, m.Handler())
	require.Equal(t, 1.0, value(t, f, "posting_http_requests_total",
		map[string]string{"route": "GET /admin/outbox/{id}", "code": "401"}))
}

// The timed wrapper keeps a sender's Ping, so the relay can still end an
// outage early, and adds none to a sender without one.
func TestWrapSenderKeepsPing(t *testing.T) {
	t.Parallel()
	m := metrics.New(databasetest.NewSQLite(t).DB, "test-1")
	down := errors.New("connection refused")
	pinging := relaytest.NewSender()
	pinging.SetDown(down)
	pg, ok := m.WrapSender(pinging.Pinging()).(relay.Pinger)
	require.True(t, ok)
	require.ErrorIs(t, pg.Ping(context.Background()), down)
	_, ok = m.WrapSender(relaytest.NewSender()).(relay.Pinger)
	require.False(t, ok)
}

// sendFunc is a relay.Sender that answers with a function.
type sendFunc func(msgs []event.Message) []error

func (f sendFunc) Send(_ context.Context, msgs []event.Message) []error { return f(msgs) }

// scrapeText serves one GET /metrics in the text format.
func scrapeText(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return rec.Body.String()
}

// samples returns the sample lines of the family name in a text scrape, each
// without the name: `{labels} value` or, for a histogram, `_bucket{...} n`.
func samples(body, name string) []string {
	var got []string
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && rest != "" && strings.ContainsAny(rest[:1], "{ _") {
			got = append(got, rest)
		}
	}
	return got
}

// The broker send metrics count every broker's sends under broker-neutral
// names. For one release their former Kafka names are exported too, with a
// HELP that names the replacement; a scrape shows both with the same series
// and values, also while sends go on.
func TestBrokerSendMetricsKeepDeprecatedNames(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, "test-1")
	timed := m.WrapSender(sendFunc(func(msgs []event.Message) []error {
		errs := make([]error, len(msgs))
		for i, msg := range msgs {
			switch msg.Key {
			case event.Key(2):
				errs[i] = errors.New("message too large")
			case event.Key(3):
				errs[i] = fmt.Errorf("send: %w", relay.ErrUnavailable)
			}
		}
		return errs
	}))
	batch := make([]event.Message, 4)
	for i := range batch {
		batch[i].Key = event.Key(int64(i)) // 0 and 1 acked, 2 rejected, 3 unavailable
	}
	require.Len(t, timed.Send(context.Background(), batch), 4)

	renamed := map[string]string{
		"posting_kafka_messages_total":        "posting_broker_messages_total",
		"posting_kafka_send_duration_seconds": "posting_broker_send_duration_seconds",
	}
	requireTwins := func(t *testing.T) {
		t.Helper()
		body := scrapeText(t, m.Handler())
		for old, name := range renamed {
			require.NotEmpty(t, samples(body, name), name)
			require.Equal(t, samples(body, name), samples(body, old), "%s and %s differ", name, old)
		}
	}

	f := scrape(t, m.Handler())
	for res, want := range map[string]float64{"acked": 2, "rejected": 1, "unavailable": 1} {
		require.Equal(t, want, value(t, f, "posting_broker_messages_total", map[string]string{"result": res}), res)
		require.Equal(t, want, value(t, f, "posting_kafka_messages_total", map[string]string{"result": res}), res)
	}
	require.Equal(t, 1.0, value(t, f, "posting_broker_send_duration_seconds", nil))
	require.Equal(t, 1.0, value(t, f, "posting_kafka_send_duration_seconds", nil))
	for old, name := range renamed {
		require.Equal(t, f[name].GetType(), f[old].GetType(), old)
		require.True(t, strings.HasPrefix(f[old].GetHelp(), "Deprecated: use "+name+"; removed in the next release."),
			"%s: %s", old, f[old].GetHelp())
		require.NotContains(t, f[name].GetHelp(), "Deprecated", name)
	}
	requireTwins(t)

	// Sends during the scrapes: each scrape still shows the twins equal.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				timed.Send(context.Background(), batch)
			}
		}
	}()
	for range 20 {
		requireTwins(t)
	}
	close(stop)
	<-done
	requireTwins(t)
}

// The worker's refused events are counted by reason, every reason exported
// from the start at 0; an unknown reason is "other". A refused event is
// also consumed, with outcome refused.
func TestRefusedEvents(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, "test-1")
	f := scrape(t, m.Handler())
	for _, r := range []string{"unknown_post", "unknown_sequence", "contradicted"} {
		require.Zero(t, value(t, f, "posting_worker_events_refused_total", map[string]string{"reason": r}), r)
	}
	m.ObserveRefused("unknown_sequence")
	m.ObserveRefused("unknown_sequence")
	m.ObserveRefused("contradicted")
	m.ObserveRefused("forged")
	m.ObserveConsumed("POSTING_EVENT", "refused")
	f = scrape(t, m.Handler())
	for r, want := range map[string]float64{"unknown_post": 0, "unknown_sequence": 2, "contradicted": 1, "other": 1} {
		require.Equal(t, want, value(t, f, "posting_worker_events_refused_total", map[string]string{"reason": r}), r)
	}
	require.Equal(t, 1.0, value(t, f, "posting_worker_events_consumed_total",
		map[string]string{"event_type": "POSTING_EVENT", "outcome": "refused"}))
}

// The worker's publications are counted by outcome; an unknown outcome is
// "other", and the lag is observed for published posts only.
func TestPublicationOutcomes(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, "test-1")
	f := scrape(t, m.Handler())
	for _, o := range []string{"published", "cancelled", "expired", "failed"} {
		require.Zero(t, value(t, f, "posting_worker_publications_total", map[string]string{"outcome": o}), o)
	}

	m.ObservePublication(2 * time.Second)
	m.ObservePublicationOutcome("published")
	m.ObservePublicationLag(time.Second)
	m.ObservePublicationOutcome("cancelled")
	m.ObservePublicationOutcome("expired")
	m.ObservePublicationOutcome("failed")
	m.ObservePublicationOutcome("failed")
	m.ObservePublicationOutcome("exploded")

	f = scrape(t, m.Handler())
	for o, want := range map[string]float64{"published": 2, "cancelled": 1, "expired": 1, "failed": 2, "other": 1} {
		require.Equal(t, want, value(t, f, "posting_worker_publications_total", map[string]string{"outcome": o}), o)
	}
	require.Len(t, f["posting_worker_publications_total"].GetMetric(), 5)
	lag := f["posting_worker_publication_lag_seconds"].GetMetric()[0].GetHistogram()
	require.EqualValues(t, 2, lag.GetSampleCount())
	require.Equal(t, 3.0, lag.GetSampleSum())
}

// Every posting_* series this package exports; the metrics list of
// docs/operations.md names each of them, so a new one here belongs there
// too. posting_kafka_send_duration_seconds and posting_kafka_messages_total
// are the deprecated names of the broker send metrics, kept for one release.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	m := metrics.New(databasetest.NewSQLite(t).DB, "test-1")
	m.ObserveConsumed("POSTING_EVENT", "processed")
	m.HTTP(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	m.WatchDependency("database", func(context.Context) error { return nil })
	m.WatchConsumerLag("g", "t", func(context.Context) (map[int32]int64, error) { return map[int32]int64{0: 1}, nil })
	var got []string
	for name := range scrape(t, m.Handler()) {
		if strings.HasPrefix(name, "posting_") {
			got = append(got, name)
		}
	}
	require.ElementsMatch(t, []string{
		"posting_outbox_stats_up", "posting_outbox_rows", "posting_outbox_oldest_pending_age_seconds",
		"posting_outbox_discarded_rows", "posting_outbox_blocked_rows",
		"posting_database_connections_opened_total", "posting_database_connections_open", "posting_database_connections_max",
		"posting_relay_polls_total", "posting_relay_events_sent_total", "posting_relay_events_retried_total",
		"posting_relay_events_failed_total", "posting_relay_events_recovered_total", "posting_relay_events_released_total",
		"posting_relay_claim_conflicts_total", "posting_relay_batch_duration_seconds", "posting_relay_batch_size",
		"posting_broker_send_duration_seconds", "posting_broker_messages_total",
		"posting_kafka_send_duration_seconds", "posting_kafka_messages_total",
		"posting_scheduler_runs_total", "posting_scheduler_run_duration_seconds", "posting_scheduler_posts_total",
		"posting_http_requests_total", "posting_http_request_duration_seconds", "posting_admin_auth_failures_total",
		"posting_worker_events_consumed_total", "posting_worker_events_refused_total",
		"posting_worker_publications_total", "posting_worker_publication_lag_seconds",
		"posting_dependency_up", "posting_kafka_consumer_lag_messages",
	}, got)
}

// Each watched dependency is 1 while its ping answers and 0 once it fails,
// and a ping that hangs is cut at the scrape timeout instead of holding the
// scrape.
func TestDependencyUp(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, "test-1", metrics.WithScrapeTimeout(200*time.Millisecond), metrics.WithRefreshInterval(time.Nanosecond))
	var brokerErr error
	var mu sync.Mutex
	m.WatchDependency("database", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	m.WatchDependency("kafka", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return brokerErr
	})
	f := scrape(t, m.Handler())
	require.Equal(t, 0.0, value(t, f, "posting_dependency_up", map[string]string{"dependency": "database"}))
	require.Equal(t, 1.0, value(t, f, "posting_dependency_up", map[string]string{"dependency": "kafka"}))
	mu.Lock()
	brokerErr = relay.ErrUnavailable
	mu.Unlock()
	f = scrape(t, m.Handler())
	require.Equal(t, 0.0, value(t, f, "posting_dependency_up", map[string]string{"dependency": "kafka"}))
}

// The consumer lag is one gauge per partition with its group and topic; a
// read that fails leaves the gauge out rather than showing a lag of 0.
func TestConsumerLagGauge(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, "test-1", metrics.WithRefreshInterval(time.Nanosecond))
	var readErr error
	m.WatchConsumerLag("posting-worker", "posting-events", func(context.Context) (map[int32]int64, error) {
		return map[int32]int64{0: 5, 1: 0, 2: 12}, readErr
	})
	f := scrape(t, m.Handler())
	require.Len(t, f["posting_kafka_consumer_lag_messages"].GetMetric(), 3)
	require.Equal(t, 12.0, value(t, f, "posting_kafka_consumer_lag_messages",
		map[string]string{"group": "posting-worker", "topic": "posting-events", "partition": "2"}))
	readErr = relay.ErrUnavailable
	require.NotContains(t, scrape(t, m.Handler()), "posting_kafka_consumer_lag_messages")
}
