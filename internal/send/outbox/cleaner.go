package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Defaults of CleanerConfig.
const (
	// DefaultRetention is how long the rows a Cleaner deletes stay.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultCleanInterval is the pause between cleaning runs.
	DefaultCleanInterval = time.Hour
	// DefaultPurgeBatchSize is the rows deleted per statement.
	DefaultPurgeBatchSize = 500
	// DefaultPurgePause is the pause between two delete statements.
	DefaultPurgePause = 100 * time.Millisecond
)

// CleanerConfig configures a Cleaner. Zero fields take the defaults.
type CleanerConfig struct {
	// Retention is how long a row is kept once it is done with (a SENT
	// row after it was sent; each purge step says what "done" is for its
	// table). Default 168h (7 days); at least 1s.
	Retention time.Duration
	// Interval is the pause between runs; the first run starts at Start.
	// Default 1h; at least 10ms.
	Interval time.Duration
	// BatchSize is the rows deleted per transaction of each step. Default
	// 500; 1..10000.
	BatchSize int
	// Pause is the wait between two delete statements, so that a large
	// backlog is removed without starving the relay of the database.
	// Default 100ms; at most 1m. Use -1 for no pause.
	Pause time.Duration
	// Now is this instance's clock; it only times a run for the log. Which
	// rows are old is decided by the database's clock (database.Now): other
	// instances wrote the rows' times, and their clocks may differ from this
	// one. Default time.Now.
	Now func() time.Time
	// Logger receives the loop's logs. Default slog.Default().
	Logger *slog.Logger
}

// DefaultCleanerConfig returns a CleanerConfig with every field at its
// default: the one place the defaults are written. A caller that takes
// values from elsewhere (a command line) starts from it, so that a zero it
// was given is refused by Validate rather than replaced.
func DefaultCleanerConfig() CleanerConfig {
	return CleanerConfig{
		Retention: DefaultRetention,
		Interval:  DefaultCleanInterval,
		BatchSize: DefaultPurgeBatchSize,
		Pause:     DefaultPurgePause,
		Now:       time.Now,
		Logger:    slog.Default(),
	}
}

func (c *CleanerConfig) setDefaults() {
	config.FillZero(c, DefaultCleanerConfig())
	if c.Pause == -1 { // no pause: a zero Pause means the default
		c.Pause = 0
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c CleanerConfig) Validate() error {
	const f = "outbox.CleanerConfig."
	switch {
	case c.Retention < time.Second:
		return config.Invalid(f+"Retention", c.Retention, "below 1s")
	case c.Interval < 10*time.Millisecond:
		return config.Invalid(f+"Interval", c.Interval, "below 10ms")
	case c.BatchSize < 1 || c.BatchSize > database.MaxPurgeBatchSize:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..%d", database.MaxPurgeBatchSize)
	case c.Pause < 0 || c.Pause > time.Minute:
		return config.Invalid(f+"Pause", c.Pause, "want 0..1m")
	}
	return nil
}

// PurgeFunc deletes, in transactions of at most batchSize rows with pause
// between two, the rows of one table that are older than olderThan, and
// returns how many it deleted. Purge is the outbox's own; the owners of
// other tables write theirs and hand them to NewCleaner.
type PurgeFunc func(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error)

// PurgeStep is one table a Cleaner keeps short.
type PurgeStep struct {
	// Name keys the step's count in CleanResult.Deleted and names it in
	// the loop's logs ("<Name>_deleted").
	Name string
	// Purge deletes the step's old rows.
	Purge PurgeFunc
	// Retention, when set, replaces CleanerConfig.Retention for this step:
	// its rows are old once they are Retention old (the idempotency keys
	// keep for a day, SENT outbox rows for a week). At least 1s.
	Retention time.Duration
}

// CleanResult counts what one cleaning run did.
type CleanResult struct {
	// Deleted counts the rows each step deleted, by step name.
	Deleted map[string]int
	// Cutoff is the database's time at the start of the run minus the
	// retention: rows older than it were deleted (by a step with a
	// Retention of its own: rows older than that time minus its Retention).
	Cutoff time.Time
}

// Total is the number of rows the run deleted, every step together.
func (r CleanResult) Total() int {
	n := 0
	for _, d := range r.Deleted {
		n += d
	}
	return n
}

// Cleaner deletes, in the background and in small batches, what no one
// needs after the retention: it runs, in order, the purge steps its caller
// gives it (the outbox's SENT rows with Purge, and the tables of other
// packages with theirs). Any number of cleaners may run on one database.
type Cleaner struct {
	startstop.BaseStartStop

	db    *gorm.DB
	cfg   CleanerConfig
	steps []PurgeStep
}

// NewCleaner returns a cleaner that runs steps on db. It needs at least one
// step, each with a name of its own and a Purge.
func NewCleaner(db *gorm.DB, cfg CleanerConfig, steps ...PurgeStep) (*Cleaner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid cleaner config: %w", err)
	}
	if len(steps) == 0 {
		return nil, errors.New("invalid cleaner: no purge step")
	}
	seen := map[string]bool{}
	for _, st := range steps {
		if st.Name == "" || st.Purge == nil || seen[st.Name] {
			return nil, fmt.Errorf("invalid cleaner: purge step %q unnamed, repeated or without Purge", st.Name)
		}
		if st.Retention != 0 && st.Retention < time.Second {
			return nil, fmt.Errorf("invalid cleaner: purge step %q: retention %s below 1s", st.Name, st.Retention)
		}
		seen[st.Name] = true
	}
	return &Cleaner{db: db, cfg: cfg, steps: steps}, nil
}

// Config returns the cleaner's configuration with defaults filled in.
func (c *Cleaner) Config() CleanerConfig { return c.cfg }

// RunOnce runs every step with the cutoff Retention (or the step's own)
// before the database's current time. A step that fails does not keep the
// others from running; the errors are joined.
func (c *Cleaner) RunOnce(ctx context.Context) (CleanResult, error) {
	res := CleanResult{Deleted: make(map[string]int, len(c.steps))}
	now, err := database.Now(ctx, c.db)
	if err != nil {
		return res, err
	}
	res.Cutoff = database.Normalize(now.Add(-c.cfg.Retention))
	var errs []error
	for _, step := range c.steps {
		cutoff := res.Cutoff
		if step.Retention != 0 {
			cutoff = database.Normalize(now.Add(-step.Retention))
		}
		n, err := step.Purge(ctx, c.db, cutoff, c.cfg.BatchSize, c.cfg.Pause)
		res.Deleted[step.Name] = n
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

// Start runs the cleaning loop in one goroutine, a run at once and then one
// per Interval, until Stop is called or ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	return c.StartLoop(ctx, "cleaner", c.loop)
}

// Stop ends the loop, interrupting a run between two statements, and waits
// for it. It is safe to call twice and without Start; a Stop before Start
// keeps the cleaner from starting later.
func (c *Cleaner) Stop() { c.BaseStartStop.Stop() }

func (c *Cleaner) loop(ctx context.Context) {
	log := c.cfg.Logger.With("component", "outbox_cleaner")
	log.Info("outbox cleaner started", "retention", c.cfg.Retention, "interval", c.cfg.Interval,
		"batch_size", c.cfg.BatchSize, "pause", c.cfg.Pause)
	defer log.Info("outbox cleaner stopped")
	for {
		start := c.cfg.Now()
		res, err := c.RunOnce(ctx)
		took := c.cfg.Now().Sub(start)
		counts := c.counts(res)
		switch {
		case err != nil && ctx.Err() != nil:
			log.Info("outbox cleaning interrupted", counts...)
			return
		case err != nil:
			log.Error("outbox cleaning failed", append([]any{"err", err}, append(counts, "took", took)...)...)
		case res.Total() > 0:
			log.Info("outbox cleaned", append(counts, "older_than", res.Cutoff, "took", took)...)
		}
		if !backoff.Sleep(ctx, c.cfg.Interval) {
			return
		}
	}
}

// counts are the log fields of res: each step's count, in step order.
func (c *Cleaner) counts(res CleanResult) []any {
	f := make([]any, 0, 2*len(c.steps))
	for _, st := range c.steps {
		f = append(f, st.Name+"_deleted", res.Deleted[st.Name])
	}
	return f
}
