package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/bench"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/metrics"
	"github.com/postingsvc/posting/migrations"
	"github.com/postingsvc/posting/relay/relaybench"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/reservation/spike"
)

// benchSettings are the sizes of `posting bench`; each is a flag.
type benchSettings struct {
	AllowNonempty   bool
	RelayEvents     int
	RelayBatch      int
	SeedStyleEvents int
	APIClients      int
	APIDuration     time.Duration
	LatencyRate     int
	LatencyDuration time.Duration
	SpikePosts      int
	SpikeDueIn      time.Duration
	CPUProfile      string
}

func addBenchFlags(fs *pflag.FlagSet, b *benchSettings, s *settings) {
	fs.BoolVar(&b.AllowNonempty, "allow-nonempty", false, "run on a database that already holds posts or outbox rows; only for data you can lose: the bench treats them as its own (its relays drain their unsent events to the bench's broker, its serve reserves due posts) and deletes nothing: its own rows stay, since ids cannot tell them from rows another writer adds meanwhile")
	fs.IntVar(&b.RelayEvents, "relay-events", 50000, "outbox rows seeded for each relay measurement (at least 5: posts of 5 events each)")
	fs.IntVar(&b.SeedStyleEvents, "seed-style-events", 2000, "outbox rows seeded for the seed-style relay, which moves one row at a time (at least 5)")
	fs.IntVar(&b.RelayBatch, "relay-batch", 500, "batch size of the relay measurements (1..5000)")
	fs.IntVar(&b.APIClients, "api-clients", 32, "concurrent clients of the create measurements")
	fs.DurationVar(&b.APIDuration, "api-duration", 10*time.Second, "how long each side of the create comparison runs (raw SQL and the API alone, in 3 alternating rounds), and the creates on the whole serve")
	fs.IntVar(&b.LatencyRate, "latency-rate", 1000, "posts/s offered over HTTP while commit → broker times are measured")
	fs.DurationVar(&b.LatencyDuration, "latency-duration", 10*time.Second, "how long the commit → broker load runs")
	fs.IntVar(&b.SpikePosts, "spike-posts", 20000, "posts due in the same second for the spike lag; 0 skips it")
	fs.DurationVar(&b.SpikeDueIn, "spike-due-in", 30*time.Second, "how long after they are written the spike's posts are due (at least 1s)")
	fs.StringVar(&b.CPUProfile, "cpu-profile", "", "write a pprof CPU profile of the create comparison (raw SQL, and the API alone with its clients, one process) to this file")
	fs.StringSliceVar(&s.KafkaBrokers, "kafka-brokers", nil, "an external Kafka cluster to send to; empty: an in-process broker")
	fs.StringVar(&s.KafkaTopic, "kafka-topic", event.DefaultTopic, "topic the bench's events go to")
	showEnvTwins(fs)
}

// validate checks the sizes; a refusal names the flag and its environment twin.
func (b *benchSettings) validate(s *settings) error {
	bad := func(flag string, v any, why string) error {
		return badSetting("--"+flag+" ("+envName(flag)+")", fmt.Sprint(v), why)
	}
	switch {
	case s.DatabaseURL == "":
		return badSetting("POSTING_DATABASE_URL", "", "posting bench needs the database to measure, such as mysql://root@127.0.0.1:3306/posting_bench or sqlite:///tmp/bench.db")
	case b.RelayEvents < 5:
		return bad("relay-events", b.RelayEvents, "must be at least 5")
	case b.SeedStyleEvents < 5:
		return bad("seed-style-events", b.SeedStyleEvents, "must be at least 5")
	case b.RelayBatch < 1 || b.RelayBatch > 5000:
		return bad("relay-batch", b.RelayBatch, "must be 1..5000")
	case b.APIClients < 1 || b.APIClients > 1024:
		return bad("api-clients", b.APIClients, "must be 1..1024")
	case b.APIDuration <= 0:
		return bad("api-duration", b.APIDuration, "must be positive")
	case b.LatencyRate < 1 || b.LatencyRate > 100000:
		return bad("latency-rate", b.LatencyRate, "must be 1..100000")
	case b.LatencyDuration <= 0:
		return bad("latency-duration", b.LatencyDuration, "must be positive")
	case b.SpikePosts < 0:
		return bad("spike-posts", b.SpikePosts, "must be 0 (skip) or more")
	case b.SpikeDueIn < time.Second:
		return bad("spike-due-in", b.SpikeDueIn, "must be at least 1s")
	case strings.TrimSpace(s.KafkaTopic) == "":
		return bad("kafka-topic", s.KafkaTopic, "must not be empty")
	}
	return nil
}

func newBenchCommand() *cobra.Command {
	var (
		s settings
		b benchSettings
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the relay, the API and commit → broker latency on the given database",
		Long: "Measures, in one run on the database of POSTING_DATABASE_URL: the relay's events/s beside\n" +
			"a raw set-based claim+ack and a seed-style relay; the API's creates/s beside the same two-row\n" +
			"transaction in raw SQL; commit → broker p50/p99 at a fixed load over HTTP with default\n" +
			"settings; and the spike lag. It writes many rows and deletes them between measurements,\n" +
			"so it refuses a database that holds posts unless --allow-nonempty is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := prepare(cmd, &s); err != nil {
				return err
			}
			if err := b.validate(&s); err != nil {
				return err
			}
			return runBench(cmd.Context(), &s, &b, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	addBenchFlags(cmd.Flags(), &b, &s)
	return cmd
}

// errNotEmpty refuses a database that holds data without --allow-nonempty.
var errNotEmpty = errors.New("the database is not empty")

// runBench runs every measurement in turn and prints each figure as soon as
// it is known.
func runBench(ctx context.Context, s *settings, b *benchSettings, out, errOut io.Writer) error {
	db, err := openDB(s)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := migrations.Apply(ctx, db, nil); err != nil {
		return err
	}
	var posts, rows int64
	if err := db.WithContext(ctx).Table("posts").Count(&posts).Error; err != nil {
		return fmt.Errorf("count posts: %w", err)
	}
	if err := db.WithContext(ctx).Table("outbox").Count(&rows).Error; err != nil {
		return fmt.Errorf("count outbox rows: %w", err)
	}
	if (posts > 0 || rows > 0) && !b.AllowNonempty {
		return usageError{fmt.Errorf("%w: %s holds %d posts and %d outbox rows; posting bench writes, drains and deletes rows: "+
			"give it a scratch database, or pass --allow-nonempty", errNotEmpty, db.Location, posts, rows)}
	}
	clean, err := newBenchCleaner(ctx, db, posts > 0 || rows > 0)
	if err != nil {
		return err
	}
	defer func() { _ = clean(context.WithoutCancel(ctx)) }()
	// The in-process components log only what goes wrong.
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))

	m, err := bench.DescribeMachine(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "posting bench on %s\n", db.Location)
	fmt.Fprintf(out, "machine: %s\n", m)
	if posts > 0 || rows > 0 {
		fmt.Fprintf(out, "the database held %d posts and %d outbox rows: the bench deletes nothing and leaves the rows it writes\n", posts, rows)
	}

	if err := benchRelay(ctx, s, b, db, clean, log, out); err != nil {
		return err
	}
	if err := benchAPI(ctx, s, b, db, clean, log, out); err != nil {
		return err
	}
	if err := clean(ctx); err != nil {
		return err
	}
	if err := benchSpike(ctx, b, db, log, out); err != nil {
		return err
	}
	return clean(ctx)
}

// newBenchCleaner returns the function that deletes what the bench wrote:
// the outbox rows and posts above the ids they had when it started (all
// rows of a database that was empty), and the publications of those posts.
// keep (a database that held rows, --allow-nonempty) deletes nothing: rows
// another writer adds while the bench runs get ids among the bench's own,
// and an id mark cannot tell them apart, so the bench leaves its rows.
func newBenchCleaner(ctx context.Context, db *database.DB, keep bool) (func(context.Context) error, error) {
	if keep {
		return func(context.Context) error { return nil }, nil
	}
	type mark struct {
		table, column string
		above         int64
	}
	marks := []mark{{"outbox", "id", 0}, {"publications", "post_id", 0}, {"posts", "id", 0}}
	for i := range marks {
		if marks[i].table == "publications" {
			continue // the posts' mark, filled below
		}
		var maxID *int64
		if err := db.WithContext(ctx).Table(marks[i].table).Select("MAX(" + marks[i].column + ")").Row().Scan(&maxID); err != nil {
			return nil, fmt.Errorf("read the last id of %s: %w", marks[i].table, err)
		}
		if maxID != nil {
			marks[i].above = *maxID
		}
	}
	marks[1].above = marks[2].above
	return func(ctx context.Context) error {
		for _, mk := range marks {
			err := db.WithContext(ctx).Session(&gorm.Session{AllowGlobalUpdate: true}).
				Exec("DELETE FROM "+mk.table+" WHERE "+mk.column+" > ?", mk.above).Error
			if err != nil {
				return fmt.Errorf("delete the bench's rows of %s: %w", mk.table, err)
			}
		}
		return nil
	}, nil
}

// benchRelay measures the relay beside the raw set-based limit and the seed
// project's relay, each draining a fresh backlog.
func benchRelay(ctx context.Context, s *settings, b *benchSettings, db *database.DB, clean func(context.Context) error, log *slog.Logger, out io.Writer) error {
	brokers, stopBroker, err := startBenchBroker(s, log)
	if err != nil {
		return err
	}
	defer stopBroker()
	producer, err := kafka.NewProducer(s.producerConfig(brokers), log)
	if err != nil {
		return fmt.Errorf("kafka producer: %w", s.settingError(err))
	}
	defer producer.Close()
	where := "in-process broker"
	if len(s.KafkaBrokers) > 0 {
		where = "brokers " + strings.Join(s.KafkaBrokers, ",")
	}
	drain := func(n int, run func() (relaybench.Result, error)) (relaybench.Result, error) {
		if err := clean(ctx); err != nil {
			return relaybench.Result{}, err
		}
		if err := relaybench.Seed(ctx, db.DB, n); err != nil {
			return relaybench.Result{}, err
		}
		return run()
	}
	raw, err := drain(b.RelayEvents, func() (relaybench.Result, error) { return relaybench.Raw(ctx, db.DB, b.RelayBatch) })
	if err != nil {
		return err
	}
	rel, err := drain(b.RelayEvents, func() (relaybench.Result, error) {
		return relaybench.Relay(ctx, db.DB, producer, b.RelayBatch)
	})
	if err != nil {
		return err
	}
	def, fixed, err := drainDefaultVsFixed(b, rel, drain, func(batch int) (relaybench.Result, error) {
		return relaybench.Relay(ctx, db.DB, producer, batch)
	}, func() (relaybench.Result, error) { return relaybench.Default(ctx, db.DB, producer) })
	if err != nil {
		return err
	}
	seed, err := drain(b.SeedStyleEvents, func() (relaybench.Result, error) { return relaybench.SeedStyle(ctx, db.DB, producer) })
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "relay: backlog of %d events (%d per post), batch %d, %s\n", b.RelayEvents, relaybench.EventsPerPost, b.RelayBatch, where)
	fmt.Fprintf(out, "  raw set-based claim+ack events/s: %.0f (no broker)\n", raw.PerSecond())
	fmt.Fprintf(out, "  relay events/s: %.0f (%.2f x raw)\n", rel.PerSecond(), ratio(rel.PerSecond(), raw.PerSecond()))
	printDefaultVsFixed(out, def, fixed, raw)
	fmt.Fprintf(out, "  seed-style relay events/s: %.0f (%.3f x raw; backlog of %d, one row at a time)\n",
		seed.PerSecond(), ratio(seed.PerSecond(), raw.PerSecond()), b.SeedStyleEvents)
	err = benchRelayInstances(ctx, s, b, db, brokers, func(n int) error {
		if err := clean(ctx); err != nil {
			return err
		}
		return relaybench.Seed(ctx, db.DB, n)
	}, log, out)
	if err != nil {
		return err
	}
	return clean(ctx)
}

// benchAPI measures the API's creates beside raw SQL, then, on a `serve`
// started in-process with default settings, commit → broker at a fixed load
// and the creates again with the relay and worker sharing the database.
func benchAPI(ctx context.Context, s *settings, b *benchSettings, db *database.DB, clean func(context.Context) error, log *slog.Logger, out io.Writer) error {
	if err := clean(ctx); err != nil {
		return err
	}
	apiURL, stopAPI, err := startAPIAlone(db, log)
	if err != nil {
		return err
	}
	defer stopAPI()
	stopProfile, err := startCPUProfile(b.CPUProfile)
	if err != nil {
		return err
	}
	// Alternating rounds: a machine whose load drifts weighs on both sides
	// alike.
	var raw, alone bench.Throughput
	part := b.APIDuration / apiRounds
	for range apiRounds {
		if err := clean(ctx); err != nil {
			return err
		}
		r, err := bench.RawCreate(ctx, db, b.APIClients, part)
		if err != nil {
			return err
		}
		if err := clean(ctx); err != nil {
			return err
		}
		a, err := bench.APICreate(ctx, apiURL, b.APIClients, part)
		if err != nil {
			return err
		}
		raw, alone = raw.Add(r), alone.Add(a)
	}
	stopProfile()
	stopAPI()
	fmt.Fprintf(out, "api create: %d clients, %s each side in %d alternating rounds\n", b.APIClients, b.APIDuration, apiRounds)
	fmt.Fprintf(out, "  raw two-row transaction posts/s: %.0f\n", raw.PerSecond())
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, API alone: %.0f (%.2f x raw)\n", alone.PerSecond(), ratio(alone.PerSecond(), raw.PerSecond()))
	if err := clean(ctx); err != nil {
		return err
	}

	srv, err := startBenchServe(ctx, s, log)
	if err != nil {
		return err
	}
	defer srv.stop()
	where := "in-process broker"
	if len(s.KafkaBrokers) > 0 {
		where = "brokers " + strings.Join(s.KafkaBrokers, ",")
	}
	lat, err := bench.CommitToBroker(ctx, bench.LatencyConfig{BaseURL: srv.baseURL, Brokers: srv.brokers,
		Topic: s.KafkaTopic, Rate: b.LatencyRate, Duration: b.LatencyDuration})
	if err != nil {
		return err
	}
	poolBefore, err := scrapePool(ctx, srv.baseURL)
	if err != nil {
		return err
	}
	full, err := bench.APICreate(ctx, srv.baseURL, b.APIClients, b.APIDuration)
	if err != nil {
		return err
	}
	poolAfter, err := scrapePool(ctx, srv.baseURL)
	if err != nil {
		return err
	}
	if err := srv.stop(); err != nil {
		return err
	}
	fmt.Fprintf(out, "  POST /api/v1/posts posts/s, whole serve (relay and worker running): %.0f (%.2f x raw)\n", full.PerSecond(), ratio(full.PerSecond(), raw.PerSecond()))
	fmt.Fprintf(out, "  database connections opened during that run: %.0f (pool size %.0f; %.0f opened since start)\n",
		poolAfter.opened-poolBefore.opened, poolAfter.max, poolAfter.opened)
	fmt.Fprintf(out, "commit -> broker: %d posts/s over HTTP for %s, serve with default settings, %s\n", b.LatencyRate, b.LatencyDuration, where)
	fmt.Fprintf(out, "  commit -> broker latency: %d events, p50 %s, p99 %s, max %s\n", lat.Events, ms(lat.P50), ms(lat.P99), ms(lat.Max))
	if lat.Failed > 0 {
		fmt.Fprintf(out, "  creates that failed during that load (not in the figures): %d of %d, the first: %v\n", lat.Failed, lat.Failed+lat.Events, lat.FirstFailure)
	}
	return nil
}

// apiRounds is how many alternating rounds of raw SQL and API creates the
// comparison runs.
const apiRounds = 3

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

// benchSpike measures the spike lag with reservation/spike: posts due in
// the same second published through scheduler, relay and worker on an
// in-process broker, with the service's default intervals. spike.Run needs
// a database without posts, so on one that held posts before the bench it
// says so instead of a figure.
func benchSpike(ctx context.Context, b *benchSettings, db *database.DB, log *slog.Logger, out io.Writer) error {
	if b.SpikePosts == 0 {
		return nil
	}
	fmt.Fprintf(out, "spike: %d posts due in the same second, scheduler every 5s, relay and worker at their defaults, in-process broker\n", b.SpikePosts)
	cfg := spike.DefaultConfig()
	cfg.Posts, cfg.DueIn, cfg.Logger = b.SpikePosts, b.SpikeDueIn, log
	res, err := spike.Run(ctx, db.DB, cfg)
	if errors.Is(err, spike.ErrNotEmpty) {
		fmt.Fprintf(out, "  spike lag: not measured: the database holds posts of its own (%v)\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  spike lag (published_at - scheduledAt): %d posts, p50 %s, p99 %s, max %s; all WORKING after %s, all recorded by the worker after %s\n",
		res.Posts, ms(res.P50), ms(res.P99), ms(res.Max), res.AllWorking.Round(time.Millisecond), res.AllRecorded.Round(time.Millisecond))
	return nil
}

// benchServe is a `posting serve` running inside the bench.
type benchServe struct {
	baseURL string
	brokers []string
	cancel  context.CancelFunc
	done    chan error
	dataDir string
	stopped bool
	err     error
}

// startBenchServe starts serve on the bench's database with every setting
// at its default except where it listens: free loopback ports for HTTP and
// the embedded broker (whose log goes to a temporary folder), or the
// bench's external brokers. Environment variables are not read, so the
// figures are those of the defaults. It returns once /readyz answers 200.
func startBenchServe(ctx context.Context, bs *settings, log *slog.Logger) (*benchServe, error) {
	httpAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	kafkaAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	dataDir, err := os.MkdirTemp("", "posting-bench-")
	if err != nil {
		return nil, err
	}
	var s settings
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addCommonFlags(fs, &s)
	addServeFlags(fs, &s)
	addHTTPServerFlags(fs, &s)
	addWorkerFlags(fs, &s)
	addRabbitMQFlags(fs, &s)
	addAuthFlags(fs, &s)
	addServeAuthFlags(fs, &s)
	// The bench's 32 clients come from one address: the per-caller write
	// limit would measure itself.
	args := []string{"--database-url", bs.DatabaseURL, "--data-dir", dataDir, "--http-addr", httpAddr,
		"--embedded-kafka-addr", kafkaAddr, "--kafka-topic", bs.KafkaTopic, "--instance-id", "posting-bench-serve",
		"--api-write-rate", "off"}
	if len(bs.KafkaBrokers) > 0 {
		args = append(args, "--kafka-brokers", strings.Join(bs.KafkaBrokers, ","))
	}
	if err := fs.Parse(args); err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, err
	}
	if err := s.validateServe(); err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	srv := &benchServe{baseURL: "http://" + httpAddr, brokers: s.brokers(), cancel: cancel,
		done: make(chan error, 1), dataDir: dataDir}
	go func() { srv.done <- serve(sctx, &s, log) }()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(srv.baseURL + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return srv, nil
			}
		}
		select {
		case err := <-srv.done:
			srv.stopped, srv.err = true, err
			_ = os.RemoveAll(dataDir)
			return nil, fmt.Errorf("serve for the bench stopped at start: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = srv.stop()
			return nil, errors.New("serve for the bench was not ready within 60s")
		}
	}
}

// stop shuts serve down and removes its data dir; it is safe twice.
func (srv *benchServe) stop() error {
	if srv.stopped {
		return srv.err
	}
	srv.stopped = true
	srv.cancel()
	srv.err = <-srv.done
	_ = os.RemoveAll(srv.dataDir)
	return srv.err
}

// freeLoopbackAddr is a loopback address with a port nothing listens on now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// startBenchBroker starts an in-process broker for the relay measurements,
// or returns the bench's external brokers.
func startBenchBroker(s *settings, log *slog.Logger) (brokers []string, stop func(), err error) {
	if len(s.KafkaBrokers) > 0 {
		return s.KafkaBrokers, func() {}, nil
	}
	cfg := kafka.DefaultEmbeddedConfig()
	cfg.Addr, cfg.Topic = "127.0.0.1:0", s.KafkaTopic
	e, err := kafka.StartEmbedded(cfg, log)
	if err != nil {
		return nil, nil, fmt.Errorf("in-process broker: %w", err)
	}
	return []string{e.Addr()}, e.Close, nil
}

// startCPUProfile starts a CPU profile into path; "" profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// ms prints d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
