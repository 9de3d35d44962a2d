package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
)

// Defaults of CleanerConfig.
const (
	// DefaultRetention is how long SENT rows stay (POSTING_OUTBOX_RETENTION).
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
	// Retention is how long a SENT row is kept after it was sent
	// (POSTING_OUTBOX_RETENTION). Default 168h (7 days); at least 1s.
	Retention time.Duration
	// Interval is the pause between runs; the first run starts at Start.
	// Default 1h; at least 10ms.
	Interval time.Duration
	// BatchSize is the rows deleted per statement. Default 500; 1..10000.
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

func (c *CleanerConfig) setDefaults() {
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Interval == 0 {
		c.Interval = DefaultCleanInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultPurgeBatchSize
	}
	switch c.Pause {
	case 0:
		c.Pause = DefaultPurgePause
	case -1:
		c.Pause = 0
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first setting out of its limits.
func (c CleanerConfig) Validate() error {
	switch {
	case c.Retention < time.Second:
		return fmt.Errorf("retention %s is below 1s", c.Retention)
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("interval %s is below 10ms", c.Interval)
	case c.BatchSize < 1 || c.BatchSize > MaxPurgeBatchSize:
		return fmt.Errorf("batch size %d is outside 1..%d", c.BatchSize, MaxPurgeBatchSize)
	case c.Pause < 0 || c.Pause > time.Minute:
		return fmt.Errorf("pause %s is outside 0..1m", c.Pause)
	}
	return nil
}

// CleanResult counts what one cleaning run did.
type CleanResult struct {
	// Deleted SENT rows.
	Deleted int
	// Cutoff is the database's time at the start of the run minus the
	// retention: rows sent before it were deleted.
	Cutoff time.Time
}

// Cleaner deletes SENT rows older than the retention in the background, in
// small batches (see Purge). Any number of cleaners may run on one database.
type Cleaner struct {
	db  *gorm.DB
	cfg CleanerConfig

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// NewCleaner returns a cleaner of db's outbox table.
func NewCleaner(db *gorm.DB, cfg CleanerConfig) (*Cleaner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid cleaner config: %w", err)
	}
	return &Cleaner{db: db, cfg: cfg}, nil
}

// Config returns the cleaner's configuration with defaults filled in.
func (c *Cleaner) Config() CleanerConfig { return c.cfg }

// RunOnce deletes, batch by batch, every SENT row sent more than Retention
// before the database's current time.
func (c *Cleaner) RunOnce(ctx context.Context) (CleanResult, error) {
	now, err := database.Now(ctx, c.db)
	if err != nil {
		return CleanResult{}, err
	}
	cutoff := Normalize(now.Add(-c.cfg.Retention))
	n, err := Purge(ctx, c.db, cutoff, c.cfg.BatchSize, c.cfg.Pause)
	return CleanResult{Deleted: n, Cutoff: cutoff}, err
}

// Start runs the cleaning loop in one goroutine, a run at once and then one
// per Interval, until Stop is called or ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil || c.stopped {
		return errors.New("cleaner already started or stopped")
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go c.loop(ctx)
	return nil
}

// Stop ends the loop, interrupting a run between two statements, and waits
// for it. It is safe to call twice and without Start.
func (c *Cleaner) Stop() {
	c.mu.Lock()
	c.stopped = true // a Stop before Start keeps the cleaner from starting later
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if done != nil {
		<-done
	}
}

func (c *Cleaner) loop(ctx context.Context) {
	defer close(c.done)
	log := c.cfg.Logger.With("component", "outbox_cleaner")
	log.Info("outbox cleaner started", "retention", c.cfg.Retention, "interval", c.cfg.Interval,
		"batch_size", c.cfg.BatchSize, "pause", c.cfg.Pause)
	defer log.Info("outbox cleaner stopped")
	for {
		start := c.cfg.Now()
		res, err := c.RunOnce(ctx)
		took := c.cfg.Now().Sub(start)
		switch {
		case err != nil && ctx.Err() != nil:
			log.Info("outbox cleaning interrupted", "deleted", res.Deleted)
			return
		case err != nil:
			log.Error("outbox cleaning failed", "err", err, "deleted", res.Deleted, "took", took)
		case res.Deleted > 0:
			log.Info("outbox cleaned", "deleted", res.Deleted, "sent_before", res.Cutoff, "took", took)
		}
		t := time.NewTimer(c.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
