// Package api is the service's HTTP API: the posts resource and the health
// probes, every error an RFC 9457 problem+json document.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// DefaultReadyTimeout bounds each readiness check unless Config.ReadyTimeout
// says otherwise.
const DefaultReadyTimeout = 2 * time.Second

// Check is one readiness check of /readyz, such as pinging the database.
type Check struct {
	// Name identifies the check in the 503 answer and in logs.
	Name string
	// Fn returns nil when the dependency is usable; it should return once
	// ctx is done.
	Fn func(ctx context.Context) error
}

// Config configures the handler.
type Config struct {
	// Posts serves /api/v1/posts and /api/v1/series. Required.
	Posts *reservation.Service
	// Ready are the checks of /readyz: all run concurrently, each with
	// ReadyTimeout; any failure answers 503 naming the failing checks. No
	// checks: /readyz answers 200.
	Ready []Check
	// ReadyTimeout bounds each readiness check. Default DefaultReadyTimeout
	// (2s); must be positive.
	ReadyTimeout time.Duration
	// Logger receives internal errors (answered with a bare 500) and
	// recovered panics. Default slog.Default().
	Logger *slog.Logger
	// Routes are extra routes mounted as given, keyed by a net/http pattern
	// such as "GET /metrics". A pattern that clashes with the API's own is a
	// configuration error.
	Routes map[string]http.Handler
	// TracerProvider, if set, makes a server span of every request
	// (otelhttp), named after the method and route pattern, continuing an
	// incoming W3C traceparent. Nil: no spans; an incoming traceparent is
	// still continued, and a request without one gets a fresh, unsampled
	// trace context (telemetry.EnsureTrace), so the outbox rows it writes
	// carry a trace id either way.
	TracerProvider trace.TracerProvider
	// Auth, when set, verifies the bearer JWT of every /api/v1/... request
	// (401 without a valid one) and scopes the posts to its caller. nil:
	// the API is open to anyone and every post is everyone's.
	Auth *auth.Verifier
	// WriteLimit bounds the writes (POST, PATCH) of /api/v1/... per caller:
	// per token subject, or per client IP without authentication. A batch
	// create counts one write per post (a dry run one in all). Zero: no
	// bound.
	WriteLimit WriteLimit
}

// WriteLimit is at most Requests writes per caller in any Window (a sliding
// window); more are answered 429 with Retry-After.
type WriteLimit struct {
	// Requests is the writes allowed per Window; 0: no limit.
	Requests int
	// Window is the length of the window; at least 1s when Requests > 0.
	Window time.Duration
}

func (c Config) withDefaults() Config {
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports a missing or out-of-range setting.
func (c Config) Validate() error {
	if c.Posts == nil {
		return errors.New("Posts must be set")
	}
	if c.ReadyTimeout <= 0 {
		return fmt.Errorf("ReadyTimeout must be positive, got %s", c.ReadyTimeout)
	}
	if err := validateChecks(c.Ready); err != nil {
		return err
	}
	for pattern, h := range c.Routes {
		if h == nil {
			return fmt.Errorf("route %q has no handler", pattern)
		}
	}
	if c.WriteLimit.Requests < 0 || (c.WriteLimit.Requests > 0 && c.WriteLimit.Window < time.Second) {
		return fmt.Errorf("WriteLimit %d per %s: want Requests >= 0 and, with Requests, a Window of at least 1s",
			c.WriteLimit.Requests, c.WriteLimit.Window)
	}
	return nil
}

// NewHandler returns the API's handler.
func NewHandler(cfg Config) (http.Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid api config: %w", err)
	}
	p := &posts{svc: cfg.Posts, log: cfg.Logger}
	hc := &health{checks: cfg.Ready, timeout: cfg.ReadyTimeout, log: cfg.Logger}
	limit := newWriteLimiter(cfg.WriteLimit) // once: every write route counts against it
	read := func(h http.HandlerFunc) http.Handler { return guard(cfg, h, nil) }
	write := func(h http.HandlerFunc) http.Handler { return guard(cfg, h, limit) }
	costly := func(h http.HandlerFunc) http.Handler { return charged(cfg, h, limit) }
	routes := map[string]http.Handler{
		"POST /api/v1/posts":             write(p.create),
		"POST /api/v1/posts/batch":       batchGuard(cfg, http.HandlerFunc(p.createBatch), limit, cfg.Logger),
		"GET /api/v1/posts":              read(p.list),
		"GET /api/v1/posts/{id}":         read(p.byID(p.svc.Get)),
		"PATCH /api/v1/posts/{id}":       write(p.update),
		"POST /api/v1/posts/{id}/cancel": write(p.byID(p.svc.Cancel)),
	}
	maps.Copy(routes, (&series{svc: cfg.Posts, log: cfg.Logger}).routes(read, write, costly))
	maps.Copy(routes, hc.routes())
	for pattern, h := range cfg.Routes {
		if _, dup := routes[pattern]; dup {
			return nil, fmt.Errorf("invalid api config: route %q is one of the API's own", pattern)
		}
		routes[pattern] = h
	}
	mux := http.NewServeMux()
	// Sorted, so that which of two clashing patterns is reported does not
	// depend on map order.
	patterns := make([]string, 0, len(routes))
	for pattern := range routes {
		patterns = append(patterns, pattern)
	}
	slices.Sort(patterns)
	for _, pattern := range patterns {
		if err := handle(mux, pattern, routes[pattern]); err != nil {
			return nil, fmt.Errorf("invalid api config: %w", err)
		}
	}
	return routed{traced(&handler{mux: mux, log: cfg.Logger, patterns: patterns}, mux, cfg.TracerProvider), patterns}, nil
}

// traced wraps h in the request's span and trace context (see
// Config.TracerProvider).
func traced(h http.Handler, mux *http.ServeMux, tp trace.TracerProvider) http.Handler {
	ensure := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctx := r.Context(); !trace.SpanContextFromContext(ctx).IsValid() {
			r = r.WithContext(telemetry.EnsureTrace(ctx))
		}
		h.ServeHTTP(w, r)
	})
	if tp == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("traceparent") != "" {
				r = r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			}
			ensure.ServeHTTP(w, r)
		})
	}
	return otelhttp.NewHandler(ensure, "http",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // metrics are Prometheus's (internal/operate/metrics/)
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if _, pattern := mux.Handler(r); pattern != "" {
				return pattern // "POST /api/v1/posts/{id}/cancel"
			}
			return r.Method
		}))
}

// Patterns returns the net/http patterns a handler of NewHandler routes,
// sorted, its own and Config.Routes alike ("GET /healthz", "POST
// /api/v1/posts", ...); nil for any other handler. The OpenAPI document's
// test walks them, so no route goes undocumented.
func Patterns(h http.Handler) []string {
	if hh, ok := h.(routed); ok {
		return slices.Clone(hh.patterns)
	}
	return nil
}

// routed is NewHandler's answer: the traced handler and the patterns it
// routes, for Patterns.
type routed struct {
	http.Handler
	patterns []string
}

// handle registers a route, turning the mux's panic on an invalid or
// clashing pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("route %q: %v", pattern, v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// handler adds to the mux what every response needs: problem+json for the
// mux's own 404 and 405, and a 500 for a panic.
type handler struct {
	mux      *http.ServeMux
	log      *slog.Logger
	patterns []string // sorted
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tw := &response.StatusWriter{ResponseWriter: w}
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			// The handler's way to abort the response: let net/http do it.
			panic(v)
		}
		h.log.LogAttrs(r.Context(), slog.LevelError, "panic serving request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
		if tw.Status() != 0 {
			// Part of a response is out: only a broken connection can tell
			// the client it is incomplete.
			panic(http.ErrAbortHandler)
		}
		response.WriteProblem(tw, http.StatusInternalServerError, "internal server error", "")
	}()
	_, pattern := h.mux.Handler(r)
	response.RecordRoute(r.Context(), pattern)
	if pattern == "" {
		// No route matched: the mux answers 404, 405 (with Allow) or a
		// redirect to the clean path in text/plain; give the first two the
		// problem+json form.
		h.mux.ServeHTTP(&fallbackWriter{ResponseWriter: tw, r: r, hint: h.hint(r.URL.Path)}, r)
		return
	}
	h.mux.ServeHTTP(tw, r)
}

// fallbackWriter replaces the mux's text/plain 404 and 405 bodies with
// problems, keeping its headers (Allow).
type fallbackWriter struct {
	http.ResponseWriter
	r        *http.Request
	hint     string // the 404's detail: where to look instead
	replaced bool
}

// hint says, for a path nothing answers, what a person who typed it may
// have looked for: the API's routes at the root, and what turns the admin
// endpoints and the console on under /admin.
func (h *handler) hint(path string) string {
	switch {
	case path == "/":
		return "this is the posting service's API: GET /openapi.json lists its routes; the operator console is at /admin/ when POSTING_ADMIN_TOKEN is set"
	case (path == "/admin" || strings.HasPrefix(path, "/admin/")) && !slices.Contains(h.patterns, "GET /admin/{$}"):
		return "the admin endpoints and the operator console are off: set POSTING_ADMIN_TOKEN (at least 32 bytes) on serve to turn them on"
	}
	return ""
}

func (w *fallbackWriter) WriteHeader(code int) {
	switch code {
	case http.StatusNotFound:
		w.replaced = true
		detail := fmt.Sprintf("no resource at %s", w.r.URL.Path)
		if w.hint != "" {
			detail += "; " + w.hint
		}
		response.WriteProblem(w.ResponseWriter, code, detail, "")
	case http.StatusMethodNotAllowed:
		w.replaced = true
		allow := w.Header().Get("Allow")
		response.WriteProblem(w.ResponseWriter, code, fmt.Sprintf("method %s is not allowed on %s; allowed: %s",
			w.r.Method, w.r.URL.Path, allow), "")
	default:
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *fallbackWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// HealthRoutes returns GET /healthz and GET /readyz answering exactly as
// NewHandler's do, for a process that serves no API (posting worker), so a
// probe reads every process alike: 200 JSON, or 503 problem+json naming the
// failing checks. ready and timeout are as Config.Ready and
// Config.ReadyTimeout (0: DefaultReadyTimeout); log receives the errors of
// failing checks (nil: slog.Default()).
func HealthRoutes(ready []Check, timeout time.Duration, log *slog.Logger) (map[string]http.Handler, error) {
	cfg := Config{Ready: ready, ReadyTimeout: timeout, Logger: log}.withDefaults()
	if cfg.ReadyTimeout <= 0 {
		return nil, fmt.Errorf("invalid health config: ReadyTimeout must be positive, got %s", cfg.ReadyTimeout)
	}
	if err := validateChecks(cfg.Ready); err != nil {
		return nil, fmt.Errorf("invalid health config: %w", err)
	}
	return (&health{checks: cfg.Ready, timeout: cfg.ReadyTimeout, log: cfg.Logger}).routes(), nil
}

func validateChecks(ready []Check) error {
	for i, chk := range ready {
		if chk.Name == "" || chk.Fn == nil {
			return fmt.Errorf("readiness check %d needs a Name and an Fn", i)
		}
	}
	return nil
}

// health serves /healthz and /readyz.
type health struct {
	checks  []Check
	timeout time.Duration
	log     *slog.Logger
}

func (h *health) routes() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /healthz": http.HandlerFunc(h.healthz),
		"GET /readyz":  http.HandlerFunc(h.readyz),
	}
}

// healthz answers 200 whenever the process can serve HTTP at all.
func (h *health) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, h.log, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz runs every check concurrently, so the answer takes at most one
// timeout, and answers 503 naming the checks that failed. Their errors are
// logged rather than shown: they can name hosts and addresses.
func (h *health) readyz(w http.ResponseWriter, r *http.Request) {
	errs := make([]error, len(h.checks))
	var wg sync.WaitGroup
	for i, chk := range h.checks {
		wg.Go(func() { errs[i] = h.run(r.Context(), chk) })
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, h.checks[i].Name)
			h.log.LogAttrs(r.Context(), slog.LevelWarn, "readiness check failed",
				slog.String("check", h.checks[i].Name), slog.Any("error", err))
		}
	}
	if len(failed) > 0 {
		response.WriteProblem(w, http.StatusServiceUnavailable, "not ready: check "+strings.Join(failed, ", ")+" failed", "")
		return
	}
	status := map[string]string{}
	for _, chk := range h.checks {
		status[chk.Name] = "ok"
	}
	writeJSON(w, r, h.log, http.StatusOK, map[string]any{"status": "ready", "checks": status})
}

// run runs one check within the timeout, also when its Fn ignores ctx (it is
// then left to finish in the background) or panics.
func (h *health) run(ctx context.Context, chk Check) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				result <- fmt.Errorf("check panicked: %v", v)
			}
		}()
		result <- chk.Fn(ctx)
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %s: %w", h.timeout, ctx.Err())
	}
}
