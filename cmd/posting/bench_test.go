package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/operate/bench"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// smallBench are sizes that run the whole bench in seconds.
var smallBench = []string{"--relay-events", "50", "--seed-style-events", "20", "--relay-batch", "10", "--api-clients", "2",
	"--api-duration", "200ms", "--api-batch-size", "10", "--api-batch-total", "55", "--latency-rate", "50,60", "--latency-duration", "300ms", "--spike-posts", "10", "--spike-due-in", "1s"}

// TestBenchPrintsEveryFigure runs posting bench with small sizes on a fresh
// SQLite file and MariaDB database, and requires a line for every figure.
func TestBenchPrintsEveryFigure(t *testing.T) {
	t.Parallel()
	urls := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "bench.db") },
		"mysql":  func(t *testing.T) string { return databasetest.MySQLURL(t, "posting_bench") },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out := runSmallBench(t, url(t))
			for _, want := range []string{
				"machine: ", " cores, ", "go1.",
				"raw set-based claim+ack events/s: ", "\n  relay events/s: ", "seed-style relay events/s: ",
				"raw two-row transaction posts/s: ",
				"raw grouped creates posts/s (2 writers, up to 100 creates a transaction): ",
				"POST /api/v1/posts posts/s, API alone: ",
				"raw batches posts/s (2 writers, 10 posts a transaction): ",
				"POST /api/v1/posts/batch posts/s, 10 posts a request, API alone: ",
				"55 posts through POST /api/v1/posts/batch, 10 a request, API alone: ",
				"POST /api/v1/posts posts/s, whole serve (relay and worker running): ",
				"commit -> broker latency: ", " p50 ", " p99 ",
				"spike lag",
			} {
				require.Contains(t, out, want)
			}
			require.Contains(t, out, "relay and worker at their defaults, in-process Kafka broker\n")
			require.NotContains(t, out, "RabbitMQ", "no RabbitMQ spike unless asked for")
			require.Regexp(t, `API alone: [1-9][0-9]* \([0-9.]+ x raw, [0-9.]+ x raw grouped\)`, out, "a create rate, beside raw SQL")
			require.Regexp(t, `up to 100 creates a transaction\): [1-9][0-9]* \([0-9.]+ x raw\)`, out, "a grouped raw rate")
			require.Regexp(t, `API alone, one transaction a create \(group size 1\): [1-9][0-9]* \([0-9.]+ x raw\)\n`, out, "single creates without group commit")
			require.Regexp(t, `POST /api/v1/posts, one client, API alone: p50 [0-9.]+ ms, p99 [0-9.]+ ms; one transaction a create \(group size 1\): p50 [0-9.]+ ms, p99 [0-9.]+ ms \([1-9][0-9]* and [1-9][0-9]* creates\)\n`, out,
				"what a lone client waits for a create, with group commit and without")
			require.Regexp(t, `batch posts/s, 10 posts a request, API alone: [1-9][0-9]* \([0-9.]+ x single creates, [0-9.]+ x single creates one transaction each, [0-9.]+ x raw batches\)`, out,
				"a batch rate, beside single creates with and without group commit and raw batches")
			require.Regexp(t, `raw batches posts/s \(2 writers, 10 posts a transaction\): [1-9][0-9]* \([0-9.]+ x single creates\)`, out, "the batch's floor in raw SQL")
			require.Regexp(t, `55 posts through POST /api/v1/posts/batch, 10 a request, API alone: [0-9.]+ s \([1-9][0-9]* posts/s\)`, out)
			require.Regexp(t, `relay events/s, default settings \(batch 100 growing to 1000 while polls come back full\): [1-9][0-9]* \([0-9.]+ x the best fixed batch, [0-9]+; [0-9.]+ x raw\)`, out)
			require.Regexp(t, `relay events/s at fixed batches: ([0-9]+: [0-9]+, )+[0-9]+: [0-9]+\n`, out)
			for _, perPost := range []string{"5", "1"} {
				require.Regexp(t, `relay events/s, default settings, instances draining one backlog at once \(`+perPost+` events per post\): 1: [1-9][0-9]* \(1\.00 x 1\), 2: [1-9][0-9]* \([0-9.]+ x 1\), 4: [1-9][0-9]* \([0-9.]+ x 1\)\n`, out)
			}
			require.Regexp(t, `commit -> broker: 50 posts/s[^\n]*\n  commit -> broker latency: [1-9][0-9]* events[^\n]*\n(  created -> sent_at[^\n]*\n)?(  creates that failed[^\n]*\n)?commit -> broker: 60 posts/s[^\n]*\n  commit -> broker latency: [1-9]`, out, "each rate given, in order")
			require.Regexp(t, `whole serve: 2 clients, 200ms each side in 3 rounds alternating with raw SQL[^\n]*\n`+
				`  raw two-row transaction posts/s, in those rounds: [1-9][0-9]*\n`+
				`  POST /api/v1/posts posts/s, whole serve \(relay and worker running\): [1-9][0-9]* \([0-9.]+ x raw\)\n`+
				`  database connections opened during the creates: [0-9]+ \(pool size [1-9][0-9]*; [1-9][0-9]* opened since each serve started, summed\)\n`,
				out, "the whole serve's creates beside raw rounds of their own")
			require.Regexp(t, `latency: [1-9][0-9]* events, p50 [0-9.]+ ms, p99 [0-9.]+ ms`, out)
			require.Regexp(t, `commit -> broker latency: [1-9][0-9]* events[^\n]*\n  created -> sent_at, as the relay records them: p50 [0-9.]+ ms, p99 [0-9.]+ ms, max [0-9.]+ ms\n`, out,
				"the relay's own record beside what a client sees")
			require.Regexp(t, `spike lag \(published_at - scheduledAt\): 10 posts, p50 -?[0-9.]+ ms, p99 -?[0-9.]+ ms \(-?[0-9.]+ x the floor\)`, out)
			require.Regexp(t, `spike floor: raw SQL writes the same 10 PUBLISHED publications and post statuses in bulk \(1000 a transaction\) in [0-9.]+m?s\n`, out)
		})
	}
}

// TestBenchStartsAFreshServeForEachWholeServeRound: the creates on a whole
// serve run in rounds that alternate with raw SQL, each on a serve of its
// own started after the raw round, besides the serve of the commit → broker
// loads. Each serve warns once, on its own address, that its API is
// unauthenticated.
func TestBenchStartsAFreshServeForEachWholeServeRound(t *testing.T) {
	t.Parallel()
	out, errOut, code := runCLI(t, append([]string{"bench", "--database-url", "sqlite://" + filepath.Join(t.TempDir(), "bench.db")}, smallBench...)...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	addrs := map[string]bool{}
	for _, m := range regexp.MustCompile(`msg="the API is unauthenticated[^\n]* addr=(\S+)`).FindAllStringSubmatch(errOut, -1) {
		addrs[m[1]] = true
	}
	require.Len(t, addrs, 1+3, "one serve for the latency loads and one for each of the 3 rounds:\n%s", errOut)
}

// TestBenchServesUseTheBenchsPoolSettings: the serves the bench starts
// take its POSTING_DATABASE_MAX_CONNS, as its own raw creates do, and their
// /metrics say so.
func TestBenchServesUseTheBenchsPoolSettings(t *testing.T) {
	t.Parallel()
	out := runSmallBench(t, "sqlite://"+filepath.Join(t.TempDir(), "bench.db"), "--database-max-conns", "3", "--database-max-idle-conns", "2")
	require.Regexp(t, `database connections opened during the creates: [0-9]+ \(pool size 3;`, out)
}

// runSmallBench runs posting bench with smallBench's sizes on url and
// returns what it printed; it fails the test unless the bench exits 0.
func runSmallBench(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, append(append([]string{"bench", "--database-url", url}, smallBench...), args...)...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	return out
}

// TestBenchWritesCPUProfilesAndALatencyTrace: --cpu-profile and
// --serve-cpu-profile each leave a pprof CPU profile (gzipped protobuf
// naming its sample types) at their path, and --latency-trace a Go
// execution trace, for go tool trace.
func TestBenchWritesCPUProfilesAndALatencyTrace(t *testing.T) {
	dir := t.TempDir()
	comparison, serve := filepath.Join(dir, "create.prof"), filepath.Join(dir, "serve.prof")
	tracePath := filepath.Join(dir, "latency.trace")
	runSmallBench(t, "sqlite://"+filepath.Join(dir, "bench.db"), "--cpu-profile", comparison, "--serve-cpu-profile", serve,
		"--latency-trace", tracePath)
	trace, err := os.ReadFile(tracePath)
	require.NoError(t, err, "the trace file exists")
	require.Regexp(t, `^go 1\.\d+ trace\x00`, string(trace[:min(len(trace), 16)]), "a Go execution trace's header")
	require.Greater(t, len(trace), 1<<10, "the trace holds the loads' events, not a header alone")
	// go tool trace, as the benchmarks page reads it, makes a profile of it.
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command that runs these tests")
	prof, err := exec.Command(goTool, "tool", "trace", "-pprof=sync", tracePath).Output()
	require.NoError(t, err, "go tool trace reads the trace")
	zr, err := gzip.NewReader(bytes.NewReader(prof))
	require.NoError(t, err, "go tool trace wrote a pprof profile")
	syncProf, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.True(t, bytes.Contains(syncProf, []byte("nanoseconds")), "the blocking profile names its unit")
	for _, path := range []string{comparison, serve} {
		f, err := os.Open(path)
		require.NoError(t, err, "the profile file exists")
		zr, err := gzip.NewReader(f)
		require.NoError(t, err, "%s is gzipped, as pprof writes it", path)
		data, err := io.ReadAll(zr)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		for _, want := range []string{"samples", "count", "cpu", "nanoseconds"} {
			require.True(t, bytes.Contains(data, []byte(want)), "%s names the CPU profile's sample type %q", path, want)
		}
	}
}

// TestBenchRunsTheSpikeThroughRabbitMQToo: with --spike-rabbitmq-url the
// spike runs a second time, through RabbitMQ, and both lags are printed.
func TestBenchRunsTheSpikeThroughRabbitMQToo(t *testing.T) {
	t.Parallel()
	out := runSmallBench(t, "sqlite://"+filepath.Join(t.TempDir(), "bench.db"), "--spike-rabbitmq-url", rabbitmqtest.URL(t))
	require.Regexp(t, `relay and worker at their defaults, in-process Kafka broker\n  spike lag \(published_at - scheduledAt\): 10 posts, p50 -?[0-9.]+ ms`, out)
	require.Regexp(t, `relay and worker at their defaults, RabbitMQ\n  spike lag \(published_at - scheduledAt\): 10 posts, p50 -?[0-9.]+ ms`, out)
}

// TestBenchRefusesADatabaseWithPosts: a database holding a post is refused
// (exit 2, naming --allow-nonempty) and keeps its post; with the flag the
// bench runs and leaves the post as it was.
func TestBenchRefusesADatabaseWithPosts(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "bench.db")
	db, err := database.Open(url, "")
	require.NoError(t, err)
	databasetest.Migrate(t, db)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	post, err := svc.Create(context.Background(), reservation.CreateInput{Title: "mine", Content: "keep me", ScheduledAt: time.Now().Add(48 * time.Hour)})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	out, errOut, code := runCLI(t, append([]string{"bench", "--database-url", url}, smallBench...)...)
	require.Equal(t, exitUsage, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, "1 posts")
	require.Contains(t, errOut, "--allow-nonempty")
	require.NotContains(t, out, "posts/s")

	out, errOut, code = runCLI(t, append([]string{"bench", "--database-url", url, "--allow-nonempty"}, smallBench...)...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "API alone: ")
	require.Contains(t, out, "spike lag: not measured: the database holds posts")

	db, err = database.Open(url, "")
	require.NoError(t, err)
	defer db.Close()
	require.Contains(t, out, "the bench deletes nothing")
	kept := databasetest.Load[reservation.Post](t, db.DB, post.ID)
	require.Equal(t, "keep me", kept.Content, "the bench leaves a post it did not write as it was")
	require.Equal(t, reservation.StatusReserved, kept.Status)
}

// TestBenchSettingErrors: a bad size, an output file that cannot be
// created or no database exits 2 naming it, before any database is opened.
func TestBenchSettingErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.db")
	url := "sqlite://" + path
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--api-clients", "0"}, "--api-clients"},
		{[]string{"--relay-batch", "9000"}, "--relay-batch"},
		{[]string{"--api-batch-size", "1001"}, "--api-batch-size"},
		{[]string{"--api-batch-total", "0"}, "--api-batch-total"},
		{[]string{"--latency-duration", "-1s"}, "--latency-duration"},
		{[]string{"--latency-rate", "200,0"}, "--latency-rate"},
		{[]string{"--api-duration", "soon"}, "api-duration"},
		{[]string{"--latency-trace", filepath.Join(t.TempDir(), "missing", "latency.trace")}, "--latency-trace (POSTING_LATENCY_TRACE)"},
		{[]string{"--serve-cpu-profile", t.TempDir()}, "--serve-cpu-profile (POSTING_SERVE_CPU_PROFILE)"},
		{[]string{"--cpu-profile", filepath.Join(t.TempDir(), "missing", "create.prof")}, "--cpu-profile (POSTING_CPU_PROFILE)"},
	} {
		_, errOut, code := runCLI(t, append([]string{"bench", "--database-url", url}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want)
	}
	require.NoFileExists(t, path, "a refused setting opens no database")
	t.Setenv("POSTING_DATABASE_URL", "")
	_, errOut, code := runCLI(t, "bench")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "POSTING_DATABASE_URL")
}

// TestBenchRefusesARecordingPathThatCannotBeWritten: a path whose folder
// exists but which cannot be created (a symbolic link into a missing
// folder, a folder the kernel allows no file in) exits 2 naming its flag
// before a database is opened, instead of failing with exit 1 minutes into
// the run; a good path given beside it is left as it was (not created).
func TestBenchRefusesARecordingPathThatCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "bench.db")
	dangling := filepath.Join(dir, "latency.trace")
	require.NoError(t, os.Symlink(filepath.Join(dir, "missing", "latency.trace"), dangling))
	good := filepath.Join(dir, "create.prof")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cpu-profile", good, "--latency-trace", dangling}, "--latency-trace (POSTING_LATENCY_TRACE)"},
		{[]string{"--cpu-profile", good, "--serve-cpu-profile", "/proc/posting-bench.prof"}, "--serve-cpu-profile (POSTING_SERVE_CPU_PROFILE)"},
	} {
		_, errOut, code := runCLI(t, append(append([]string{"bench", "--database-url", url}, smallBench...), tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want)
		require.Contains(t, errOut, "cannot be written")
		require.NoFileExists(t, good, "checking a path leaves no file behind")
	}
	require.NoFileExists(t, filepath.Join(dir, "bench.db"), "a refused setting opens no database")
}

// TestBenchRefusesOneFileForTwoRecordings: the same file for two of the
// profiles and the trace, however spelt (relative, through a symbolic
// link), exits 2 naming both flags; the later recording would otherwise
// overwrite the earlier one without a word. An existing file given once is
// accepted and not truncated by the check.
func TestBenchRefusesOneFileForTwoRecordings(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "bench.db")
	prof := filepath.Join(dir, "out.prof")
	require.NoError(t, os.WriteFile(prof, []byte("an earlier profile"), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(dir, link))
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, filepath.Join(dir, "new.trace"))
	require.NoError(t, err)
	for _, tc := range []struct {
		args       []string
		want, also string
	}{
		{[]string{"--cpu-profile", prof, "--latency-trace", prof}, "--latency-trace (POSTING_LATENCY_TRACE)", "--cpu-profile"},
		{[]string{"--cpu-profile", prof, "--serve-cpu-profile", filepath.Join(link, "out.prof")}, "--serve-cpu-profile (POSTING_SERVE_CPU_PROFILE)", "--cpu-profile"},
		{[]string{"--serve-cpu-profile", filepath.Join(dir, "new.trace"), "--latency-trace", rel}, "--latency-trace (POSTING_LATENCY_TRACE)", "--serve-cpu-profile"},
	} {
		_, errOut, code := runCLI(t, append(append([]string{"bench", "--database-url", url}, smallBench...), tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want)
		require.Contains(t, errOut, "is the file of "+tc.also+" too")
		require.NoFileExists(t, filepath.Join(dir, "new.trace"), "checking a path leaves no file behind")
	}
	kept, err := os.ReadFile(prof)
	require.NoError(t, err)
	require.Equal(t, "an earlier profile", string(kept), "the check does not truncate an existing file")
	require.NoFileExists(t, filepath.Join(dir, "bench.db"), "a refused setting opens no database")
}

// TestBenchChecksARecordingFIFOWithoutOpeningIt: a named pipe given for
// the trace is accepted without being opened, since opening it would wait
// for a reader (the check would hang) and closing it would end the
// reader's stream before the bench writes anything. The refusal of a
// later setting shows the check got past the pipe.
func TestBenchChecksARecordingFIFOWithoutOpeningIt(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "latency.trace")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	url := "sqlite://" + filepath.Join(dir, "bench.db")
	done := make(chan int, 1)
	var errOut string
	go func() {
		var code int
		_, errOut, code = runCLI(t, "bench", "--database-url", url, "--latency-trace", fifo, "--cpu-profile", fifo)
		done <- code
	}()
	select {
	case code := <-done:
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "--latency-trace (POSTING_LATENCY_TRACE)")
		require.Contains(t, errOut, "is the file of --cpu-profile too")
	case <-time.After(20 * time.Second):
		t.Fatal("the check of a named pipe waited for a reader")
	}
}

// TestBenchFailsWhenARecordingCannotBeWrittenOut: a trace whose writes
// fail (/dev/full, as a disk that fills during the run) makes the bench
// exit 1 naming the trace and the write error, after printing the figures
// it measured. The runtime drops its writer's errors, so the bench exited
// 0 and left an empty or cut trace without a word.
func TestBenchFailsWhenARecordingCannotBeWrittenOut(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bench.db")
	out, errOut, code := runCLI(t, append(append([]string{"bench", "--database-url", url}, smallBench...), "--latency-trace", "/dev/full")...)
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Regexp(t, `trace: write /dev/full: no space left on device`, errOut)
	require.Contains(t, out, "commit -> broker latency: ", "the figures measured are printed")
}

// TestBenchRefusesARecordingOverItsDatabase: a profile or trace path that
// is the SQLite file being measured (here through a relative path) exits 2
// naming both settings; the recording would truncate the database under
// the running bench.
func TestBenchRefusesARecordingOverItsDatabase(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "bench.db")
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, dbPath)
	require.NoError(t, err)
	out, errOut, code := runCLI(t, append(append([]string{"bench", "--database-url", "sqlite://" + dbPath}, smallBench...), "--cpu-profile", rel)...)
	require.Equal(t, exitUsage, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, "--cpu-profile (POSTING_CPU_PROFILE)")
	require.Contains(t, errOut, "is the file of --database-url too")
	require.NoFileExists(t, dbPath, "a refused setting opens no database")
}

// TestBenchNamesAFileGivenAsARecordingsFolder: a recording path under a
// file says that file is not a folder, not that the folder does not exist.
func TestBenchNamesAFileGivenAsARecordingsFolder(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notDir, []byte("x"), 0o644))
	_, errOut, code := runCLI(t, "bench", "--database-url", "sqlite://"+filepath.Join(dir, "bench.db"), "--latency-trace", filepath.Join(notDir, "latency.trace"))
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--latency-trace (POSTING_LATENCY_TRACE)")
	require.Contains(t, errOut, notDir+" is a file, not a folder")
}

// TestBenchReportsATraceItCouldNotWriteWhenTheLatencyServeStopsWithAnError:
// the commit → broker loads' trace that could not be written out is
// reported even when the serve of those loads then stops with an error:
// the operator is told why the file is cut, not only why the run stopped.
func TestBenchReportsATraceItCouldNotWriteWhenTheLatencyServeStopsWithAnError(t *testing.T) {
	ctx := context.Background()
	var (
		s settings
		b bench.Config
	)
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	addCommonFlags(fs, &s)
	addBenchFlags(fs, &b, &s)
	require.NoError(t, fs.Parse(append([]string{"--database-url", "sqlite://" + filepath.Join(t.TempDir(), "bench.db"),
		"--latency-trace", "/dev/full"}, smallBench...))) // every write fails: no space left on device
	require.NoError(t, validateBench(&b, &s))
	db, err := openDB(&s)
	require.NoError(t, err)
	defer db.Close()
	_, err = migrations.Apply(ctx, db, nil)
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	serves := 0
	cfg := b
	cfg.Producer, cfg.Logger = s.producerConfig(s.KafkaBrokers), log
	cfg.LatencyRates = []int{50}
	cfg.StartServe = func(ctx context.Context) (*bench.Serve, error) {
		srv, err := startBenchServe(ctx, &s, log)
		if err != nil {
			return nil, err
		}
		serves++
		if serves == 1 { // the serve of the commit → broker loads
			stop := srv.Stop
			srv.Stop = func() error { return errors.Join(stop(), errors.New("shutdown did not finish")) }
		}
		return srv, nil
	}
	err = bench.Run(ctx, db, cfg, io.Discard)
	require.ErrorContains(t, err, "shutdown did not finish")
	require.ErrorContains(t, err, "trace: write /dev/full", "the cut trace is reported too")
}
