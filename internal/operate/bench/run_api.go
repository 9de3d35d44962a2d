package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// apiRounds is how many alternating rounds of raw SQL and API creates the
// comparison runs.
const apiRounds = 3

// runAPI measures the API's creates beside raw SQL, single and in batches
// (and the time a load of cfg.BatchTotal posts in batches takes), then, on a `serve`
// started by cfg.StartServe with default settings, commit → broker at a
// fixed load and the creates again with the relay and worker sharing the
// database.
func runAPI(ctx context.Context, cfg Config, db *database.DB, clean func(context.Context) error, out io.Writer) error {
	if err := clean(ctx); err != nil {
		return err
	}
	apiURL, stopAPI, err := startAPIAlone(db, cfg.Logger)
	if err != nil {
		return err
	}
	defer stopAPI()
	stopProfile, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		return err
	}
	// Alternating rounds: a machine whose load drifts weighs on both sides
	// alike.
	var raw, rawGrouped, alone, rawBatch, batch Throughput
	part := cfg.APIDuration / apiRounds
	for range apiRounds {
		if err := clean(ctx); err != nil {
			return err
		}
		r, err := RawCreate(ctx, db, cfg.APIClients, part)
		if err != nil {
			return err
		}
		if err := clean(ctx); err != nil {
			return err
		}
		g, err := RawGroupedCreate(ctx, db, cfg.APIClients, part)
		if err != nil {
			return err
		}
		rawGrouped = rawGrouped.Add(g)
		if err := clean(ctx); err != nil {
			return err
		}
		a, err := APICreate(ctx, apiURL, cfg.APIClients, part)
		if err != nil {
			return err
		}
		if err := clean(ctx); err != nil {
			return err
		}
		rb, err := RawBatchCreate(ctx, db, cfg.BatchSize, part)
		if err != nil {
			return err
		}
		if err := clean(ctx); err != nil {
			return err
		}
		b, err := APIBatchCreate(ctx, apiURL, cfg.APIClients, cfg.BatchSize, part)
		if err != nil {
			return err
		}
		raw, alone, rawBatch, batch = raw.Add(r), alone.Add(a), rawBatch.Add(rb), batch.Add(b)
	}
	if err := clean(ctx); err != nil {
		return err
	}
	total, err := APIBatchTotal(ctx, apiURL, cfg.APIClients, cfg.BatchSize, cfg.BatchTotal)
	if err != nil {
		return err
	}
	// A recording that could not be written out fails the run once its
	// figures are printed: they hold, the file does not.
	recorded := []error{stopProfile()}
	stopAPI()
	fmt.Fprintf(out, "api create: %d clients, %s each side in %d alternating rounds\n", cfg.APIClients, cfg.APIDuration, apiRounds)
	fmt.Fprintf(out, "  raw two-row transaction posts/s: %.0f\n", raw.PerSecond())
	fmt.Fprintf(out, "  raw grouped creates posts/s (%d writers, up to %d creates a transaction): %.0f (%.2f x raw)\n",
		reservation.DefaultGroupCommitters, reservation.DefaultGroupSize, rawGrouped.PerSecond(), ratio(rawGrouped.PerSecond(), raw.PerSecond()))
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, API alone: %.0f (%.2f x raw, %.2f x raw grouped)\n", alone.PerSecond(),
		ratio(alone.PerSecond(), raw.PerSecond()), ratio(alone.PerSecond(), rawGrouped.PerSecond()))
	fmt.Fprintf(out, "  raw batches posts/s (%d writers, %d posts a transaction): %.0f (%.1f x single creates)\n",
		reservation.DefaultBatchConcurrency, cfg.BatchSize, rawBatch.PerSecond(), ratio(rawBatch.PerSecond(), alone.PerSecond()))
	fmt.Fprintf(out, "  POST /api/v1/posts/batch posts/s, %d posts a request, API alone: %.0f (%.1f x single creates, %.2f x raw batches)\n",
		cfg.BatchSize, batch.PerSecond(), ratio(batch.PerSecond(), alone.PerSecond()), ratio(batch.PerSecond(), rawBatch.PerSecond()))
	fmt.Fprintf(out, "  %d posts through POST /api/v1/posts/batch, %d a request, API alone: %.2f s (%.0f posts/s)\n",
		total.Count, cfg.BatchSize, total.Elapsed.Seconds(), total.PerSecond())
	if err := clean(ctx); err != nil {
		return err
	}

	srv, err := cfg.StartServe(ctx)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.Stop()
		}
	}()
	// Rates in the order given: the events of one load are all on the
	// topic before the next begins.
	lats := make([]Latency, len(cfg.LatencyRates))
	stopTrace, err := startTrace(cfg.LatencyTrace)
	if err != nil {
		return err
	}
	for i, rate := range cfg.LatencyRates {
		lat, err := CommitToBroker(ctx, LatencyConfig{BaseURL: srv.BaseURL, Brokers: srv.Brokers,
			Topic: cfg.Producer.Topic, Rate: rate, Duration: cfg.LatencyDuration, DB: db.DB})
		if err != nil {
			_ = stopTrace()
			return fmt.Errorf("commit to broker at %d posts/s: %w", rate, err)
		}
		lats[i] = lat
	}
	recorded = append(recorded, stopTrace())
	poolBefore, err := scrapePool(ctx, srv.BaseURL)
	if err != nil {
		return err
	}
	stopProfile, err = startCPUProfile(cfg.ServeCPUProfile)
	if err != nil {
		return err
	}
	full, err := APICreate(ctx, srv.BaseURL, cfg.APIClients, cfg.APIDuration)
	recorded = append(recorded, stopProfile())
	if err != nil {
		return err
	}
	poolAfter, err := scrapePool(ctx, srv.BaseURL)
	if err != nil {
		return err
	}
	stopped = true
	if err := srv.Stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, whole serve (relay and worker running): %.0f (%.2f x raw)\n", full.PerSecond(), ratio(full.PerSecond(), raw.PerSecond()))
	fmt.Fprintf(out, "  database connections opened during that run: %.0f (pool size %.0f; %.0f opened since start)\n",
		poolAfter.opened-poolBefore.opened, poolAfter.max, poolAfter.opened)
	for i, lat := range lats {
		fmt.Fprintf(out, "commit -> broker: %d posts/s over HTTP for %s, serve with default settings, %s\n", cfg.LatencyRates[i], cfg.LatencyDuration, cfg.where())
		fmt.Fprintf(out, "  commit -> broker latency: %d events, p50 %s, p99 %s, max %s\n", lat.Events, ms(lat.P50), ms(lat.P99), ms(lat.Max))
		if r := lat.Recorded; r != nil {
			fmt.Fprintf(out, "  created -> sent_at, as the relay records them: p50 %s, p99 %s, max %s\n", ms(r.P50), ms(r.P99), ms(r.Max))
		}
		if lat.Failed > 0 {
			fmt.Fprintf(out, "  creates that failed during that load (not in the figures): %d of %d, the first: %v\n", lat.Failed, lat.Failed+lat.Events, lat.FirstFailure)
		}
	}
	return errors.Join(recorded...)
}

// startAPIAlone serves the API's handler as serve mounts it (with its
// metrics middleware) on a loopback port, without the relay, scheduler and
// worker that share the database in serve: what a create costs beyond its
// two inserts.
func startAPIAlone(db *database.DB, log *slog.Logger) (baseURL string, stop func(), err error) {
	posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	if err != nil {
		return "", nil, err
	}
	h, err := api.NewHandler(api.Config{Posts: posts, Logger: log})
	if err != nil {
		return "", nil, err
	}
	m := metrics.New(db.DB, "posting-bench")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: m.HTTP(h), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	return "http://" + ln.Addr().String(), func() { once.Do(func() { _ = srv.Close() }) }, nil
}
