package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/storage/database"
)

// ErrNotEmpty is returned by Run on a database that holds posts or outbox
// rows when Config.AllowNonempty is not set.
var ErrNotEmpty = errors.New("the database is not empty")

// Config is the sizes of one Run (the flags of `posting bench`, which
// validates them) and what the caller provides.
type Config struct {
	// AllowNonempty runs on a database that holds posts or outbox rows;
	// then nothing is deleted (see Run).
	AllowNonempty bool
	// RelayEvents is the backlog seeded for each relay drain (at least 5).
	RelayEvents int
	// RelayBatch is the batch size of the relay drains beside raw SQL.
	RelayBatch int
	// SeedStyleEvents is the backlog of the seed-style relay (at least 5).
	SeedStyleEvents int
	// APIClients is the concurrent clients of the create measurements.
	APIClients int
	// APIDuration is how long each side of the create comparisons runs, in
	// alternating rounds: raw SQL beside the API alone, and raw SQL beside
	// a whole serve.
	APIDuration time.Duration
	// BatchSize is the posts of each POST /api/v1/posts/batch of the batch
	// measurements (1..1000).
	BatchSize int
	// BatchTotal is the posts the timed load creates through the batch
	// route, in batches of BatchSize (at least 1).
	BatchTotal int
	// LatencyRates are the posts/s offered while commit → broker is
	// measured, one load after the other in the order given.
	LatencyRates []int
	// LatencyDuration is how long each load runs.
	LatencyDuration time.Duration
	// SpikePosts is how many posts are due in the same second for the spike
	// lag; 0 skips it.
	SpikePosts int
	// SpikeDueIn is how long after they are written the spike's posts are due.
	SpikeDueIn time.Duration
	// SpikeRabbitMQURL, if set, runs the spike a second time through that
	// RabbitMQ broker (a fresh exchange and worker queue, deleted after).
	SpikeRabbitMQURL string
	// CPUProfile, if set, is the file a pprof CPU profile of the create
	// comparison is written to.
	CPUProfile string
	// ServeCPUProfile, if set, is the file a pprof CPU profile of the
	// creates of the first whole-serve round is written to: the serve runs
	// in this process, so it holds its API, relay, broker and worker, and
	// the bench's clients.
	ServeCPUProfile string
	// LatencyTrace, if set, is the file a Go execution trace of the
	// commit → broker loads is written to (the serve, its relay, broker and
	// worker, and the bench's clients and consumer, one process): where the
	// relay's goroutines wait, for a core, the database or the broker
	// (go tool trace -pprof=sched|net|sync).
	LatencyTrace string
	// Producer is the relay drains' producer. Without Brokers, Run starts
	// an in-process broker for them with Producer.Topic.
	Producer kafka.ProducerConfig
	// StartServe starts a whole `posting serve` on the database with the
	// bench's pool settings and default settings otherwise, sending to
	// Producer's brokers if any (the command owns the service's wiring).
	// Required.
	StartServe func(ctx context.Context) (*Serve, error)
	// Logger receives the in-process components' logs.
	Logger *slog.Logger
}

// Serve is a running `posting serve` the bench measures from outside.
type Serve struct {
	// BaseURL is its HTTP API, such as http://127.0.0.1:8080.
	BaseURL string
	// Brokers is the bootstrap list of the brokers it sends to.
	Brokers []string
	// Stop shuts it down and returns the error it stopped with; the bench
	// calls it once.
	Stop func() error
}

// Run runs every measurement of `posting bench` on db (migrated) in turn and
// prints each figure to out as soon as it is known. It refuses a database
// that holds posts or outbox rows with ErrNotEmpty unless cfg.AllowNonempty;
// on an empty one it deletes what it wrote, on another it deletes nothing
// (see NewCleaner).
func Run(ctx context.Context, db *database.DB, cfg Config, out io.Writer) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var posts, rows int64
	if err := db.WithContext(ctx).Table("posts").Count(&posts).Error; err != nil {
		return fmt.Errorf("count posts: %w", err)
	}
	if err := db.WithContext(ctx).Table("outbox").Count(&rows).Error; err != nil {
		return fmt.Errorf("count outbox rows: %w", err)
	}
	held := posts > 0 || rows > 0
	if held && !cfg.AllowNonempty {
		return fmt.Errorf("%w: %s holds %d posts and %d outbox rows; posting bench writes, drains and deletes rows: "+
			"give it a scratch database, or pass --allow-nonempty", ErrNotEmpty, db.Location, posts, rows)
	}
	clean, err := NewCleaner(ctx, db, held)
	if err != nil {
		return err
	}
	defer func() { _ = clean(context.WithoutCancel(ctx)) }()

	m, err := DescribeMachine(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "posting bench on %s\n", db.Location)
	fmt.Fprintf(out, "machine: %s\n", m)
	if held {
		fmt.Fprintf(out, "the database held %d posts and %d outbox rows: the bench deletes nothing and leaves the rows it writes\n", posts, rows)
	}
	if err := runRelay(ctx, cfg, db, clean, out); err != nil {
		return err
	}
	if err := runAPI(ctx, cfg, db, clean, out); err != nil {
		return err
	}
	if err := runSpike(ctx, cfg, db, clean, out); err != nil {
		return err
	}
	return clean(ctx)
}

// where names the brokers of the relay drains and of serve.
func (c Config) where() string {
	if len(c.Producer.Brokers) > 0 {
		return "brokers " + strings.Join(c.Producer.Brokers, ",")
	}
	return "in-process broker"
}

// startCPUProfile starts a CPU profile into path; "" profiles nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	return startRecording(path, "cpu profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts a Go execution trace into path; "" traces nothing.
func startTrace(path string) (stop func() error, err error) {
	return startRecording(path, "trace", trace.Start, trace.Stop)
}

// startRecording creates path and starts writing the runtime's record
// (what) into it; the returned stop ends it, closes the file and returns
// the first write error, which the runtime's writer drops (a full disk
// would otherwise leave a cut record without a word).
func startRecording(path, what string, start func(io.Writer) error, end func()) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w := &recordFile{f: f}
	if err := start(w); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return func() error {
		end() // returns once every write is done, so w.err is read after them
		if err := cmp.Or(w.err, f.Close()); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}, nil
}

// recordFile is a recording's file that keeps its first write error.
type recordFile struct {
	f   *os.File
	err error
}

func (r *recordFile) Write(p []byte) (int, error) {
	n, err := r.f.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
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
