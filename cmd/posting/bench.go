package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/operate/bench"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/write/api"
)

// addBenchFlags binds each size of bench.Config to a flag, and the
// relay's broker and topic to the service's Kafka settings.
func addBenchFlags(fs *pflag.FlagSet, b *bench.Config, s *settings) {
	fs.BoolVar(&b.AllowNonempty, "allow-nonempty", false, "run on a database that already holds posts or outbox rows; only for data you can lose: the bench treats them as its own (its relays drain their unsent events to the bench's broker, its serve reserves due posts) and deletes nothing: its own rows stay, since ids cannot tell them from rows another writer adds meanwhile")
	fs.IntVar(&b.RelayEvents, "relay-events", 50000, "outbox rows seeded for each relay measurement (at least 5: posts of 5 events each)")
	fs.IntVar(&b.SeedStyleEvents, "seed-style-events", 2000, "outbox rows seeded for the seed-style relay, which moves one row at a time (at least 5)")
	fs.IntVar(&b.RelayBatch, "relay-batch", 500, "batch size of the relay measurements (1..5000)")
	fs.IntVar(&b.APIClients, "api-clients", 32, "concurrent clients of the create measurements")
	fs.DurationVar(&b.APIDuration, "api-duration", 10*time.Second, "how long each side of the create comparisons runs, in 3 alternating rounds: raw SQL beside the API alone, and raw SQL beside a whole serve")
	fs.IntVar(&b.BatchSize, "api-batch-size", 1000, "posts of each POST /api/v1/posts/batch of the batch measurements (1..1000)")
	fs.IntVar(&b.BatchTotal, "api-batch-total", 100000, "posts the timed load creates through POST /api/v1/posts/batch, --api-batch-size a request")
	fs.IntSliceVar(&b.LatencyRates, "latency-rate", []int{200, 400, 1000}, "posts/s offered over HTTP while commit → broker times are measured; several, comma-separated, are measured one after the other")
	fs.DurationVar(&b.LatencyDuration, "latency-duration", 10*time.Second, "how long each commit → broker load runs")
	fs.IntVar(&b.SpikePosts, "spike-posts", 20000, "posts due in the same second for the spike lag; 0 skips it")
	fs.DurationVar(&b.SpikeDueIn, "spike-due-in", 30*time.Second, "how long after they are written the spike's posts are due (at least 1s)")
	fs.StringVar(&b.SpikeRabbitMQURL, "spike-rabbitmq-url", "", "amqp://user:pass@host:5672/vhost: also run the spike through this RabbitMQ broker (a fresh exchange and worker queue, deleted after); empty: the in-process Kafka broker only")
	fs.StringVar(&b.CPUProfile, "cpu-profile", "", "write a pprof CPU profile of the create comparison (raw SQL, and the API alone with its clients, one process) to this file")
	fs.StringVar(&b.ServeCPUProfile, "serve-cpu-profile", "", "write a pprof CPU profile of the creates of the first whole-serve round (its API, relay, broker and worker, and the bench's clients, one process) to this file")
	fs.StringVar(&b.LatencyTrace, "latency-trace", "", "write a Go execution trace of the commit → broker loads (the serve with its relay, broker and worker, and the bench's clients and consumer, one process) to this file, for go tool trace")
	fs.StringSliceVar(&s.KafkaBrokers, "kafka-brokers", nil, "an external Kafka cluster to send to; empty: an in-process broker")
	fs.StringVar(&s.KafkaTopic, "kafka-topic", event.DefaultTopic, "topic the bench's events go to")
	showEnvTwins(fs)
}

// validate checks the sizes; a refusal names the flag and its environment twin.
func validateBench(b *bench.Config, s *settings) error {
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
	case b.BatchSize < 1 || b.BatchSize > api.MaxBatchPosts:
		return bad("api-batch-size", b.BatchSize, fmt.Sprintf("must be 1..%d", api.MaxBatchPosts))
	case b.BatchTotal < 1:
		return bad("api-batch-total", b.BatchTotal, "must be at least 1")
	case len(b.LatencyRates) == 0:
		return bad("latency-rate", "", "must name at least one rate")
	case slices.ContainsFunc(b.LatencyRates, func(r int) bool { return r < 1 || r > 100000 }):
		return bad("latency-rate", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(b.LatencyRates)), ","), "[]"), "each rate must be 1..100000")
	case b.LatencyDuration <= 0:
		return bad("latency-duration", b.LatencyDuration, "must be positive")
	case b.SpikePosts < 0:
		return bad("spike-posts", b.SpikePosts, "must be 0 (skip) or more")
	case b.SpikeDueIn < time.Second:
		return bad("spike-due-in", b.SpikeDueIn, "must be at least 1s")
	case strings.TrimSpace(s.KafkaTopic) == "":
		return bad("kafka-topic", s.KafkaTopic, "must not be empty")
	}
	// The profiles and the trace are written minutes into the run: a path
	// that cannot be created is refused before anything is measured, and
	// so is one path for two of them (the later would overwrite the other)
	// or for the SQLite database the bench measures.
	written := map[string]string{}
	if path := database.FileOf(s.DatabaseURL); path != "" {
		written[resolved(path)] = "database-url"
	}
	for _, o := range []struct{ flag, path string }{
		{"cpu-profile", b.CPUProfile}, {"serve-cpu-profile", b.ServeCPUProfile}, {"latency-trace", b.LatencyTrace},
	} {
		if o.path == "" {
			continue
		}
		file, why := writable(o.path)
		if why != "" {
			return bad(o.flag, o.path, why)
		}
		if other, ok := written[file]; ok {
			return bad(o.flag, o.path, "is the file of --"+other+" too; each needs its own")
		}
		written[file] = o.flag
	}
	return nil
}

// writable opens path for writing as the bench will, and returns the
// file it names (absolute, every symbolic link resolved, so two spellings
// of one file compare equal), or why it cannot be written. A file this
// made is removed again; an existing one is not truncated.
func writable(path string) (file, why string) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return "", "is a folder; name the file to write"
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil {
		return "", "its folder " + filepath.Dir(path) + " does not exist"
	} else if !fi.IsDir() {
		return "", filepath.Dir(path) + " is a file, not a folder"
	}
	fi, err := os.Stat(path)
	made := errors.Is(err, fs.ErrNotExist)
	// A pipe or device is not opened: a FIFO's open waits for its reader,
	// and its reader would take this close for the end of the recording.
	if made || err == nil && fi.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o666)
		if err != nil {
			return "", "cannot be written: " + err.Error()
		}
		_ = f.Close()
	}
	file = resolved(path)
	if made {
		_ = os.Remove(file) // the target, not a link the operator made
	}
	return file, ""
}

// resolved is the absolute path of the file path names, with the symbolic
// links of it (if it exists) or of its folder resolved.
func resolved(path string) string {
	if file, err := filepath.EvalSymlinks(path); err == nil {
		path = file
	} else if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		path = filepath.Join(dir, filepath.Base(path))
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

func newBenchCommand() *cobra.Command {
	var (
		s settings
		b bench.Config
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the relay, the API and commit → broker latency on the given database",
		Long: "Measures, in one run on the database of POSTING_DATABASE_URL: the relay's events/s beside\n" +
			"a raw set-based claim+ack and a seed-style relay, and with 1, 2 and 4 relays on one backlog;\n" +
			"the API's creates/s beside the same two-row transaction in raw SQL; commit → broker p50/p99\n" +
			"at each load of --latency-rate over HTTP with default settings; and the spike lag (through\n" +
			"RabbitMQ too with --spike-rabbitmq-url). It writes many rows and deletes them between measurements,\n" +
			"so it refuses a database that holds posts unless --allow-nonempty is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := prepare(cmd, &s); err != nil {
				return err
			}
			if err := validateBench(&b, &s); err != nil {
				return err
			}
			return runBench(cmd.Context(), &s, &b, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	addBenchFlags(cmd.Flags(), &b, &s)
	return cmd
}

// runBench opens and migrates the database and runs bench.Run on it, with
// a serve of this binary's wiring for the whole-service figures.
func runBench(ctx context.Context, s *settings, b *bench.Config, out, errOut io.Writer) error {
	db, err := openDB(s)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := migrations.Apply(ctx, db, nil); err != nil {
		return err
	}
	// The in-process components log only what goes wrong.
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := *b
	cfg.Producer = s.producerConfig(s.KafkaBrokers)
	cfg.StartServe = func(ctx context.Context) (*bench.Serve, error) { return startBenchServe(ctx, s, log) }
	cfg.Logger = log
	err = bench.Run(ctx, db, cfg, out)
	if errors.Is(err, bench.ErrNotEmpty) {
		return usageError{err}
	}
	return s.settingError(err)
}

// startBenchServe starts serve on the bench's database with every setting
// at its default except where it listens: free loopback ports for HTTP and
// the embedded broker (whose log goes to a temporary folder), or the
// bench's external brokers. Environment variables are not read, so the
// figures are those of the defaults. It returns once /readyz answers 200.
func startBenchServe(ctx context.Context, bs *settings, log *slog.Logger) (*bench.Serve, error) {
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
	// limit would measure itself. The pool is the bench's own, so that the
	// serve's creates and the raw ones beside them have the same
	// connections.
	args := []string{"--database-url", bs.DatabaseURL, "--data-dir", dataDir, "--http-addr", httpAddr,
		"--embedded-kafka-addr", kafkaAddr, "--kafka-topic", bs.KafkaTopic, "--instance-id", "posting-bench-serve",
		"--api-write-rate", "off",
		"--database-max-conns", strconv.Itoa(bs.DatabaseMaxConns), "--database-max-idle-conns", strconv.Itoa(bs.DatabaseMaxIdle)}
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
	done := make(chan error, 1)
	go func() { done <- serve(sctx, &s, log) }()
	// stop shuts serve down and removes its data dir.
	stop := func() error {
		cancel()
		err := <-done
		_ = os.RemoveAll(dataDir)
		return err
	}
	srv := &bench.Serve{BaseURL: "http://" + httpAddr, Brokers: s.brokers(), Stop: stop}
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(srv.BaseURL + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return srv, nil
			}
		}
		select {
		case err := <-done:
			cancel()
			_ = os.RemoveAll(dataDir)
			return nil, fmt.Errorf("serve for the bench stopped at start: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, errors.New("serve for the bench was not ready within 60s")
		}
	}
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
