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
// (and the time a load of cfg.BatchTotal posts in batches takes), then, on a
// `serve` started by cfg.StartServe with default settings, commit → broker
// at fixed loads, and last the creates on a whole serve, whose relay and
// worker share the database, in rounds alternating with raw SQL.
func runAPI(ctx context.Context, cfg Config, db *database.DB, clean func(context.Context) error, out io.Writer) error {
	if err := clean(ctx); err != nil {
		return err
	}
	apiURL, stopAPI, err := startAPIAlone(db, cfg.Logger, reservation.DefaultGroupSize)
	if err != nil {
		return err
	}
	defer stopAPI()
	singleURL, stopSingle, err := startAPIAlone(db, cfg.Logger, 1)
	if err != nil {
		return err
	}
	defer stopSingle()
	stopProfile, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		return err
	}
	// A run that stops early stops the profile too: the runtime's profiler
	// is one per process, and the file is closed.
	profiling := true
	defer func() {
		if profiling {
			_ = stopProfile()
		}
	}()
	// Alternating rounds: a machine whose load drifts weighs on all sides
	// alike. Each side starts from clean tables.
	var raw, rawGrouped, alone, single, rawBatch, batch Throughput
	part := cfg.APIDuration / apiRounds
	sides := []struct {
		sum *Throughput
		run func() (Throughput, error)
	}{
		{&raw, func() (Throughput, error) { return RawCreate(ctx, db, cfg.APIClients, part) }},
		{&rawGrouped, func() (Throughput, error) { return RawGroupedCreate(ctx, db, cfg.APIClients, part) }},
		{&alone, func() (Throughput, error) { return APICreate(ctx, apiURL, cfg.APIClients, part) }},
		{&single, func() (Throughput, error) { return APICreate(ctx, singleURL, cfg.APIClients, part) }},
		{&rawBatch, func() (Throughput, error) { return RawBatchCreate(ctx, db, cfg.BatchSize, part) }},
		{&batch, func() (Throughput, error) { return APIBatchCreate(ctx, apiURL, cfg.APIClients, cfg.BatchSize, part) }},
	}
	// One client's creates, one at a time, taking turns between the two
	// APIs: what a lone client waits for a create with group commit, and
	// with each create a transaction of its own (group size 1), as before
	// group commit.
	var loneGrouped, loneSingle []time.Duration
	for range apiRounds {
		for _, side := range sides {
			if err := clean(ctx); err != nil {
				return err
			}
			t, err := side.run()
			if err != nil {
				return err
			}
			*side.sum = side.sum.Add(t)
		}
		if err := clean(ctx); err != nil {
			return err
		}
		lat, err := oneClientCreates(ctx, part, apiURL, singleURL)
		if err != nil {
			return fmt.Errorf("one client: %w", err)
		}
		loneGrouped, loneSingle = append(loneGrouped, lat[0]...), append(loneSingle, lat[1]...)
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
	profiling = false
	stopAPI()
	stopSingle()
	fmt.Fprintf(out, "api create: %d clients, %s each side in %d alternating rounds\n", cfg.APIClients, cfg.APIDuration, apiRounds)
	fmt.Fprintf(out, "  raw two-row transaction posts/s: %.0f\n", raw.PerSecond())
	fmt.Fprintf(out, "  raw grouped creates posts/s (%d writers, up to %d creates a transaction): %.0f (%.2f x raw)\n",
		reservation.DefaultGroupCommitters, reservation.DefaultGroupSize, rawGrouped.PerSecond(), ratio(rawGrouped.PerSecond(), raw.PerSecond()))
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, API alone: %.0f (%.2f x raw, %.2f x raw grouped)\n", alone.PerSecond(),
		ratio(alone.PerSecond(), raw.PerSecond()), ratio(alone.PerSecond(), rawGrouped.PerSecond()))
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, API alone, one transaction a create (group size 1): %.0f (%.2f x raw)\n",
		single.PerSecond(), ratio(single.PerSecond(), raw.PerSecond()))
	grouped, each := distribution(loneGrouped), distribution(loneSingle)
	fmt.Fprintf(out, "  POST /api/v1/posts, one client, API alone: p50 %s, p99 %s; one transaction a create (group size 1): p50 %s, p99 %s (%d and %d creates)\n",
		ms(grouped.P50), ms(grouped.P99), ms(each.P50), ms(each.P99), grouped.Events, each.Events)
	fmt.Fprintf(out, "  raw batches posts/s (%d writers, %d posts a transaction): %.0f (%.1f x single creates)\n",
		reservation.DefaultBatchConcurrency, cfg.BatchSize, rawBatch.PerSecond(), ratio(rawBatch.PerSecond(), alone.PerSecond()))
	fmt.Fprintf(out, "  POST /api/v1/posts/batch posts/s, %d posts a request, API alone: %.0f (%.1f x single creates, %.1f x single creates one transaction each, %.2f x raw batches)\n",
		cfg.BatchSize, batch.PerSecond(), ratio(batch.PerSecond(), alone.PerSecond()), ratio(batch.PerSecond(), single.PerSecond()),
		ratio(batch.PerSecond(), rawBatch.PerSecond()))
	fmt.Fprintf(out, "  %d posts through POST /api/v1/posts/batch, %d a request, API alone: %.2f s (%.0f posts/s)\n",
		total.Count, cfg.BatchSize, total.Elapsed.Seconds(), total.PerSecond())
	if err := clean(ctx); err != nil {
		return errors.Join(append(recorded, err)...)
	}
	lats, err := runCommitToBroker(ctx, cfg, db)
	recorded = append(recorded, err)
	if lats == nil {
		return errors.Join(recorded...)
	}
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
	recorded = append(recorded, runWholeServe(ctx, cfg, db, clean, out))
	return errors.Join(recorded...)
}

// runCommitToBroker starts a `serve` with default settings and offers it
// each rate of cfg.LatencyRates in turn, the events of one load all on the
// topic before the next begins. It returns nil figures when a load or the
// serve failed; with figures, an error is the trace's that could not be
// written out.
func runCommitToBroker(ctx context.Context, cfg Config, db *database.DB) ([]Latency, error) {
	srv, err := cfg.StartServe(ctx)
	if err != nil {
		return nil, err
	}
	stopTrace, err := startTrace(cfg.LatencyTrace)
	if err != nil {
		return nil, errors.Join(err, srv.Stop())
	}
	lats := make([]Latency, len(cfg.LatencyRates))
	for i, rate := range cfg.LatencyRates {
		lat, err := CommitToBroker(ctx, LatencyConfig{BaseURL: srv.BaseURL, Brokers: srv.Brokers,
			Topic: cfg.Producer.Topic, Rate: rate, Duration: cfg.LatencyDuration, DB: db.DB})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("commit to broker at %d posts/s: %w", rate, err), stopTrace(), srv.Stop())
		}
		lats[i] = lat
	}
	traced := stopTrace()
	if err := srv.Stop(); err != nil {
		return nil, errors.Join(err, traced)
	}
	return lats, traced
}

// runWholeServe measures the creates on a whole `serve`, whose relay and
// worker share the database, in apiRounds rounds that alternate with the raw
// two-row transaction: each round cleans, runs raw SQL alone for its part
// of cfg.APIDuration, cleans, and starts a fresh `serve` (cfg.StartServe)
// for the creates, stopped at the round's end. The raw side is measured in
// the same rounds, not minutes earlier in the comparison's, so a machine
// whose load drifts weighs on both sides alike.
func runWholeServe(ctx context.Context, cfg Config, db *database.DB, clean func(context.Context) error, out io.Writer) error {
	var (
		raw, full     Throughput
		opened, since float64
		poolMax       float64
		recorded      []error
	)
	// fail is a round's error, with a profile an earlier step could not
	// write out: the file is cut whether or not the run goes on.
	fail := func(err error) error { return errors.Join(append([]error{err}, recorded...)...) }
	part := cfg.APIDuration / apiRounds
	for round := range apiRounds {
		if err := clean(ctx); err != nil {
			return fail(err)
		}
		r, err := RawCreate(ctx, db, cfg.APIClients, part)
		if err != nil {
			return fail(err)
		}
		if err := clean(ctx); err != nil {
			return fail(err)
		}
		profile := ""
		if round == 0 {
			profile = cfg.ServeCPUProfile
		}
		res, err := serveRound(ctx, cfg, part, profile)
		recorded = append(recorded, res.profiled)
		if err != nil {
			return fail(err)
		}
		raw, full = raw.Add(r), full.Add(res.creates)
		opened += res.after.opened - res.before.opened
		since += res.after.opened
		poolMax = res.after.max
	}
	fmt.Fprintf(out, "whole serve: %d clients, %s each side in %d rounds alternating with raw SQL, a fresh serve with default settings each round\n",
		cfg.APIClients, cfg.APIDuration, apiRounds)
	fmt.Fprintf(out, "  raw two-row transaction posts/s, in those rounds: %.0f\n", raw.PerSecond())
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, whole serve (relay and worker running): %.0f (%.2f x raw)\n", full.PerSecond(), ratio(full.PerSecond(), raw.PerSecond()))
	fmt.Fprintf(out, "  database connections opened during the creates: %.0f (pool size %.0f; %.0f opened since each serve started, summed)\n",
		opened, poolMax, since)
	return errors.Join(recorded...)
}

// serveRoundResult is what one serve round measured.
type serveRoundResult struct {
	creates Throughput
	// before and after are the pool's figures from /metrics around the
	// creates.
	before, after poolFigures
	// profiled is the error of a CPU profile that could not be written
	// out; the figures hold.
	profiled error
}

// serveWarmUp is how long a fresh serve takes creates before the creates
// of d are timed on it: a quarter of d, at most a second.
func serveWarmUp(d time.Duration) time.Duration { return min(d/4, time.Second) }

// serveRound starts a `serve`, warms it (serveWarmUp), runs the creates on
// it for d, and stops it; a profile path records them as a CPU profile.
func serveRound(ctx context.Context, cfg Config, d time.Duration, profile string) (serveRoundResult, error) {
	var res serveRoundResult
	srv, err := cfg.StartServe(ctx)
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.Stop()
		}
	}()
	// A fresh serve's pool opens connections with its first creates: that
	// is its start, not connections it failed to keep, so the serve is
	// warmed by creates before the pool is read and the creates timed.
	if _, err := APICreate(ctx, srv.BaseURL, cfg.APIClients, serveWarmUp(d)); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	if res.before, err = scrapePool(ctx, srv.BaseURL); err != nil {
		return res, err
	}
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return res, err
	}
	res.creates, err = APICreate(ctx, srv.BaseURL, cfg.APIClients, d)
	res.profiled = stopProfile()
	if err != nil {
		return res, err
	}
	if res.after, err = scrapePool(ctx, srv.BaseURL); err != nil {
		return res, err
	}
	stopped = true
	return res, srv.Stop()
}

// startAPIAlone serves the API's handler as serve mounts it (with its
// metrics middleware) on a loopback port, without the relay, scheduler and
// worker that share the database in serve: what a create costs beyond its
// two inserts. Up to groupSize concurrent writes share a transaction (group
// commit); 1 writes each in its own, as POSTING_API_GROUP_SIZE=1 does.
func startAPIAlone(db *database.DB, log *slog.Logger, groupSize int) (baseURL string, stop func(), err error) {
	posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{GroupSize: groupSize})
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
