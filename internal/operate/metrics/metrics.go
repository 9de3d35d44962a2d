// Package metrics is the service's Prometheus instrumentation: one registry
// per process, fed through methods the wiring passes to the components.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/send/relay"
)

// DefaultScrapeTimeout bounds the outbox queries, the dependency pings and
// the consumer lag read of one scrape.
const DefaultScrapeTimeout = 3 * time.Second

// Option changes a default of New.
type Option func(*options)

type options struct {
	now           func() time.Time
	scrapeTimeout time.Duration
	refresh       time.Duration
}

// WithRefreshInterval sets how long the figures a scrape reads from the
// database or the brokers are served again before they are read anew.
// Default DefaultRefreshInterval; values <= 0 keep it.
func WithRefreshInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.refresh = d
		}
	}
}

// WithClock sets the clock the oldest pending age is measured with. Default
// time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithScrapeTimeout bounds the outbox queries of one scrape. Default
// DefaultScrapeTimeout; values <= 0 keep it.
func WithScrapeTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.scrapeTimeout = d
		}
	}
}

// Metrics owns a registry and the service's metrics. Its methods are safe
// for concurrent use.
type Metrics struct {
	reg           *prometheus.Registry
	registerer    prometheus.Registerer // reg with the instance_id label
	scrapeTimeout time.Duration
	handler       http.Handler
	deps          *dependencyCollector

	relayPolls       *prometheus.CounterVec
	relaySent        prometheus.Counter
	relayRetried     prometheus.Counter
	relayFailed      prometheus.Counter
	relayRecovered   prometheus.Counter
	relayReleased    prometheus.Counter
	relayConflicts   prometheus.Counter
	relayBatch       prometheus.Histogram
	brokerSend       *brokerSendCollector
	schedRuns        *prometheus.CounterVec
	schedDuration    prometheus.Histogram
	schedPosts       *prometheus.CounterVec
	workerLag        prometheus.Histogram
	workerPublished  *prometheus.CounterVec
	workerConsumed   *prometheus.CounterVec
	workerOutOfOrder *prometheus.CounterVec
	workerRefused    *prometheus.CounterVec
	httpRequests     *prometheus.CounterVec
	httpDuration     *prometheus.HistogramVec
	adminAuthFailed  *prometheus.CounterVec
	relayBatchSize   func() int // guarded by batchMu
	batchMu          *sync.Mutex
	refresh          time.Duration
	overdueOnce      sync.Once
	overdueC         *overdueCollector
}

// New returns the metrics of one process. db, if not nil, is read at each
// scrape for the outbox gauges (bounded by the scrape timeout); instanceID
// becomes the const label instance_id of every metric.
func New(db *gorm.DB, instanceID string, opts ...Option) *Metrics {
	o := options{now: time.Now, scrapeTimeout: DefaultScrapeTimeout, refresh: DefaultRefreshInterval}
	for _, opt := range opts {
		opt(&o)
	}
	reg := prometheus.NewRegistry()
	r := prometheus.WrapRegistererWith(prometheus.Labels{"instance_id": instanceID}, reg)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		r.MustRegister(c)
		return c
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		r.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		r.MustRegister(h)
		return h
	}
	m := &Metrics{
		reg: reg, registerer: r, scrapeTimeout: o.scrapeTimeout, refresh: o.refresh,
		deps:           newDependencyCollector(o.scrapeTimeout),
		relayBatchSize: func() int { return 0 },
		relayPolls: counterVec("posting_relay_polls_total",
			"Relay polls by result: ok, unavailable (broker unreachable), error.", "result"),
		relaySent: counter("posting_relay_events_sent_total",
			"Outbox events the broker acknowledged (now SENT)."),
		relayRetried: counter("posting_relay_events_retried_total",
			"Outbox events the broker rejected that will be retried (now RETRY)."),
		relayFailed: counter("posting_relay_events_failed_total",
			"Outbox events that used their last attempt (now FAIL), by rejection or stale recovery."),
		relayRecovered: counter("posting_relay_events_recovered_total",
			"Stale PROCESSING claims taken back from an instance that stopped."),
		relayReleased: counter("posting_relay_events_released_total",
			"Claimed events handed back unsent because the broker was unreachable (no attempt spent)."),
		relayConflicts: counter("posting_relay_claim_conflicts_total",
			"Result writes refused because another instance had recovered the claim (fenced by version)."),
		relayBatch: histogram("posting_relay_batch_duration_seconds",
			"Duration of relay polls that claimed at least one event: claim, send and record.", prometheus.DefBuckets),
		brokerSend: newBrokerSendCollector(),
		schedRuns: counterVec("posting_scheduler_runs_total",
			"Reservation scheduler runs by result: ok, error.", "result"),
		schedDuration: histogram("posting_scheduler_run_duration_seconds",
			"Duration of reservation scheduler runs.", prometheus.DefBuckets),
		schedPosts: counterVec("posting_scheduler_posts_total",
			"Posts handled by the scheduler by result: marked (now WORKING), skipped (lost a race), failed.", "result"),
		workerLag: histogram("posting_worker_publication_lag_seconds",
			"How long after its scheduledAt a post was published.",
			[]float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}),
		workerPublished: counterVec("posting_worker_publications_total",
			"Publications the worker settled by outcome: published, cancelled (the post was cancelled first), "+
				"expired (the post was not published by its publishBy), "+
				"failed (the publisher refused it; the post stays WORKING for an operator).", "outcome"),
		workerConsumed: counterVec("posting_worker_events_consumed_total",
			"Events the worker consumed by event_type and outcome: processed, duplicate, out_of_order, refused, ignored, malformed, error.", "event_type", "outcome"),
		workerOutOfOrder: counterVec("posting_worker_events_out_of_order_total",
			"Events the worker dropped by event_type because it had applied an event of the same post with the same or a higher sequence.", "event_type"),
		workerRefused: counterVec("posting_worker_events_refused_total",
			"Events the worker refused because its database contradicts them, by reason: unknown_post (no such post), "+
				"unknown_sequence (a sequence the database never wrote for the post), contradicted (a status the posts table denies).", "reason"),
		httpRequests: counterVec("posting_http_requests_total",
			"HTTP requests by route (the mux pattern, or unmatched) and status code.", "route", "code"),
		adminAuthFailed: counterVec("posting_admin_auth_failures_total",
			"Refused authentications on /admin/... by outcome: missing (no bearer token), invalid (a wrong token), "+
				"limited (refused unheard: too many failures from the source address).", "outcome"),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "posting_http_request_duration_seconds",
			Help:    "HTTP request durations by route (the mux pattern, or unmatched) and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "code"}),
	}
	r.MustRegister(m.httpDuration, m.brokerSend, cached(m.deps, o.refresh, time.Now))
	var batchMu sync.Mutex
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "posting_relay_batch_size",
		Help: "Rows the relay's next claim asks for: POSTING_RELAY_BATCH_SIZE, doubled while polls come back full up to POSTING_RELAY_MAX_BATCH_SIZE; 0 without a relay."},
		func() float64 {
			batchMu.Lock()
			defer batchMu.Unlock()
			return float64(m.relayBatchSize())
		}))
	m.batchMu = &batchMu
	for _, res := range []string{"ok", "unavailable", "error"} {
		m.relayPolls.WithLabelValues(res)
	}
	for _, res := range []string{"ok", "error"} {
		m.schedRuns.WithLabelValues(res)
	}
	for _, res := range []string{"marked", "skipped", "failed"} {
		m.schedPosts.WithLabelValues(res)
	}
	for _, res := range []string{"missing", "invalid", "limited"} {
		m.adminAuthFailed.WithLabelValues(res)
	}
	for _, res := range publicationOutcomes {
		m.workerPublished.WithLabelValues(res)
	}
	for _, reason := range refusalReasons {
		m.workerRefused.WithLabelValues(reason)
	}
	if db != nil {
		r.MustRegister(cached(newOutboxCollector(db, o.now, o.scrapeTimeout), o.refresh, time.Now), newPoolCollector(db))
	}
	// ContinueOnError: a metric that cannot be gathered must not hide the rest.
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: r, ErrorHandling: promhttp.ContinueOnError})
	return m
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Registry is the registry behind Handler, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveRelay records one relay poll; it has the signature of
// relay.Config.Observe. Rows that ended in FAIL through stale recovery count
// both as recovered and as failed. The batch duration is observed only for
// polls that claimed rows, so idle polls do not drown it.
func (m *Metrics) ObserveRelay(res relay.Result, d time.Duration, err error) {
	switch {
	case err != nil:
		m.relayPolls.WithLabelValues("error").Inc()
	case res.Unavailable:
		m.relayPolls.WithLabelValues("unavailable").Inc()
	default:
		m.relayPolls.WithLabelValues("ok").Inc()
	}
	m.relaySent.Add(float64(res.Sent))
	m.relayRetried.Add(float64(res.Retried))
	m.relayFailed.Add(float64(res.Failed + res.RecoveredFailed))
	m.relayRecovered.Add(float64(res.Recovered + res.RecoveredFailed))
	m.relayReleased.Add(float64(res.Released))
	m.relayConflicts.Add(float64(res.Fenced))
	if res.Claimed > 0 {
		m.relayBatch.Observe(d.Seconds())
	}
}

// WatchRelayBatch makes posting_relay_batch_size read size (the relay's
// BatchSize) at each scrape.
func (m *Metrics) WatchRelayBatch(size func() int) {
	m.batchMu.Lock()
	defer m.batchMu.Unlock()
	m.relayBatchSize = size
}

// WrapSender returns s timed: each Send is one observation of
// posting_broker_send_duration_seconds, and each message's outcome is
// counted in posting_broker_messages_total, whichever the broker.
// An s that is a relay.Pinger stays one.
func (m *Metrics) WrapSender(s relay.Sender) relay.Sender {
	t := &timedSender{next: s, m: m}
	if pg, ok := s.(relay.Pinger); ok {
		return &timedPinger{timedSender: t, pinger: pg}
	}
	return t
}

// timedPinger is a timedSender whose sender can be pinged.
type timedPinger struct {
	*timedSender
	pinger relay.Pinger
}

// Ping asks the wrapped sender.
func (t *timedPinger) Ping(ctx context.Context) error { return t.pinger.Ping(ctx) }

type timedSender struct {
	next relay.Sender
	m    *Metrics
}

// SendBound passes on the wrapped sender's bound (0: unknown).
func (t *timedSender) SendBound() time.Duration {
	if b, ok := t.next.(relay.SendBounder); ok {
		return b.SendBound()
	}
	return 0
}

func (t *timedSender) Send(ctx context.Context, msgs []event.Message) []error {
	start := time.Now()
	errs := t.next.Send(ctx, msgs)
	d := time.Since(start)
	var acked, rejected, unavailable int
	for _, err := range errs {
		switch {
		case err == nil:
			acked++
		case errors.Is(err, relay.ErrUnavailable):
			unavailable++
		default:
			rejected++
		}
	}
	t.m.brokerSend.observe(d, acked, rejected, unavailable)
	return errs
}

// ObserveScheduler records one reservation scheduler run with its counts
// (reservation.SchedulerResult's Marked, Skipped, Failed).
func (m *Metrics) ObserveScheduler(marked, skipped, failed int, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.schedRuns.WithLabelValues(result).Inc()
	m.schedDuration.Observe(d.Seconds())
	m.schedPosts.WithLabelValues("marked").Add(float64(marked))
	m.schedPosts.WithLabelValues("skipped").Add(float64(skipped))
	m.schedPosts.WithLabelValues("failed").Add(float64(failed))
}

// publicationOutcomes are the outcome label values of
// posting_worker_publications_total, all exported from the start at 0.
var publicationOutcomes = []string{"published", "cancelled", "expired", "failed"}

// ObservePublication records a post the worker published, lag after its
// scheduledAt: outcome "published" and one lag observation. It has the
// signature of worker.Config.ObservePublished. A worker hook that reports
// every outcome should call ObservePublicationOutcome and
// ObservePublicationLag instead, so a publication is counted once.
func (m *Metrics) ObservePublication(lag time.Duration) {
	m.ObservePublicationOutcome("published")
	m.ObservePublicationLag(lag)
}

// ObservePublicationOutcome counts a publication the worker settled, by
// outcome: "published", "cancelled" (the post was cancelled, or gone, when
// its time came), "expired" (the post was not published by its publishBy)
// or "failed" (the publisher refused it for good). Other
// values are counted as "other", so a caller's typo cannot create label
// values.
func (m *Metrics) ObservePublicationOutcome(outcome string) {
	switch outcome {
	case "published", "cancelled", "expired", "failed":
	default:
		outcome = "other"
	}
	m.workerPublished.WithLabelValues(outcome).Inc()
}

// ObservePublicationLag records how long after its scheduledAt a post was
// published (a negative lag, from clock skew, counts as 0).
func (m *Metrics) ObservePublicationLag(lag time.Duration) {
	m.workerLag.Observe(max(lag, 0).Seconds())
}

// ObserveConsumed records an event the worker consumed, by outcome:
// processed, duplicate (a redelivery its inbox recognised), out_of_order
// (older than an event of its post already applied, dropped; also counted
// in posting_worker_events_out_of_order_total), refused (contradicted by
// the worker's database, dropped; ObserveRefused counts why), ignored (a
// CREATED or UPDATED event, which asks nothing of the worker), malformed
// (skipped) or error (handling failed and is tried again). Event types
// outside the contract's two, and unknown outcomes, are counted as "other",
// so a stray message cannot create label values.
func (m *Metrics) ObserveConsumed(eventType, outcome string) {
	if !event.Type(eventType).Valid() {
		eventType = "other"
	}
	switch outcome {
	case "processed", "duplicate", "refused", "ignored", "malformed", "error":
	case "out_of_order":
		m.workerOutOfOrder.WithLabelValues(eventType).Inc()
	default:
		outcome = "other"
	}
	m.workerConsumed.WithLabelValues(eventType, outcome).Inc()
}

// refusalReasons are the reason label values of
// posting_worker_events_refused_total (worker.Refused*), all exported from
// the start at 0.
var refusalReasons = []string{"unknown_post", "unknown_sequence", "contradicted"}

// ObserveRefused counts an event the worker refused, by reason:
// unknown_post, unknown_sequence or contradicted. It has the signature of
// worker.Config.ObserveRefused. Other reasons are counted as "other".
func (m *Metrics) ObserveRefused(reason string) {
	if !slices.Contains(refusalReasons, reason) {
		reason = "other"
	}
	m.workerRefused.WithLabelValues(reason).Inc()
}

// HTTP counts and times the requests next serves, by route and status code.
// The route is the pattern next records with response.RecordRoute (the
// API's handler does; wrap a bare ServeMux in response.Routed), "unmatched"
// when none matched. Request.Pattern cannot serve: a wrapper that replaces
// the request (WithContext) hides it. Patterns keep the label set bounded,
// unlike raw paths.
func (m *Metrics) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &response.StatusWriter{ResponseWriter: w}
		ctx, matched := response.WithRoute(r.Context())
		next.ServeHTTP(sw, r.WithContext(ctx))
		route := matched()
		if route == "" {
			route = "unmatched"
		}
		code := sw.Status()
		if code == 0 {
			code = http.StatusOK
		}
		labels := []string{route, strconv.Itoa(code)}
		m.httpRequests.WithLabelValues(labels...).Inc()
		m.httpDuration.WithLabelValues(labels...).Observe(time.Since(start).Seconds())
	})
}

// ObserveAdminAuthFailure counts a refused admin authentication by its
// outcome (admin.Config.ObserveAuthFailure).
func (m *Metrics) ObserveAdminAuthFailure(outcome string) {
	m.adminAuthFailed.WithLabelValues(outcome).Inc()
}
