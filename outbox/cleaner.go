package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/internal/backoff"
	"github.com/postingsvc/posting/internal/startstop"
)

// Defaults of CleanerConfig.
const (
	// DefaultRetention is how long SENT rows, inbox rows and settled
	// publications stay.
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
	// Retention is how long a SENT row is kept after it was sent, an inbox
	// row after its event was processed, and a PUBLISHED or CANCELLED
	// publication after it was settled. Default 168h (7 days); at least 1s.
	Retention time.Duration
	// Interval is the pause between runs; the first run starts at Start.
	// Default 1h; at least 10ms.
	Interval time.Duration
	// BatchSize is the rows deleted per transaction of each table. Default
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
	case c.BatchSize < 1 || c.BatchSize > MaxPurgeBatchSize:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..%d", MaxPurgeBatchSize)
	case c.Pause < 0 || c.Pause > time.Minute:
		return config.Invalid(f+"Pause", c.Pause, "want 0..1m")
	}
	return nil
}

// CleanResult counts what one cleaning run did.
type CleanResult struct {
	// Deleted SENT outbox rows.
	Deleted int
	// Inbox rows deleted.
	Inbox int
	// Publications deleted (PUBLISHED or CANCELLED).
	Publications int
	// Cutoff is the database's time at the start of the run minus the
	// retention: rows sent, processed or settled before it were deleted.
	Cutoff time.Time
}

// Cleaner deletes, in the background and in small batches, what no one
// needs after the retention: SENT outbox rows (see Purge), inbox rows (see
// PurgeInbox) and settled publications (see PurgePublications). Any number
// of cleaners may run on one database.
type Cleaner struct {
	startstop.BaseStartStop

	db  *gorm.DB
	cfg CleanerConfig
}

// NewCleaner returns a cleaner of db's outbox, inbox and publications tables.
func NewCleaner(db *gorm.DB, cfg CleanerConfig) (*Cleaner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid cleaner config: %w", err)
	}
	return &Cleaner{db: db, cfg: cfg}, nil
}

// Config returns the cleaner's configuration with defaults filled in.
func (c *Cleaner) Config() CleanerConfig { return c.cfg }

// RunOnce deletes, batch by batch, every SENT row sent, inbox row processed
// and PUBLISHED or CANCELLED publication settled more than Retention before
// the database's current time. A table that fails does not keep the others
// from being cleaned; the errors are joined.
func (c *Cleaner) RunOnce(ctx context.Context) (CleanResult, error) {
	var res CleanResult
	now, err := database.Now(ctx, c.db)
	if err != nil {
		return res, err
	}
	res.Cutoff = database.Normalize(now.Add(-c.cfg.Retention))
	var errs []error
	for _, step := range []struct {
		n     *int
		purge func(context.Context, *gorm.DB, time.Time, int, time.Duration) (int, error)
	}{{&res.Deleted, Purge}, {&res.Inbox, PurgeInbox}, {&res.Publications, PurgePublications}} {
		n, err := step.purge(ctx, c.db, res.Cutoff, c.cfg.BatchSize, c.cfg.Pause)
		*step.n = n
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return res, errors.Join(errs...)
}

// The worker's tables, known here by name only: the worker and inbox
// packages import this one, and the cleaner needs just the keys and times.
type (
	inboxRow struct {
		Consumer    string    `gorm:"column:consumer;primaryKey"`
		EventID     string    `gorm:"column:event_id;primaryKey"`
		ProcessedAt time.Time `gorm:"column:processed_at"`
	}
	publicationRow struct {
		PostID    int64     `gorm:"column:post_id;primaryKey;autoIncrement:false"`
		Status    string    `gorm:"column:status"`
		UpdatedAt time.Time `gorm:"column:updated_at"`
	}
)

func (inboxRow) TableName() string       { return "inbox" }
func (publicationRow) TableName() string { return "publications" }

// settledPublications are the publication statuses PurgePublications
// deletes. FAILED is kept: the post stays WORKING and an operator needs the
// row (its last_error) to retry or give up; once retried and settled it
// goes like the others. PENDING is work still to do.
var settledPublications = []string{"PUBLISHED", "CANCELLED"}

// PurgeInbox deletes inbox rows processed before olderThan, in transactions
// of at most batchSize rows taken in primary-key order (consumer, event_id;
// event ids are UUIDv7, so that is roughly time order), with pause between
// two. Once its row is gone, a redelivery of the event is processed again;
// for the worker that is harmless (a publication is re-created PENDING and
// settled from the post's own status, and the post table is the one that
// says PUBLISHED), and by then Kafka's own retention (7 days by default) has
// usually dropped the message. Safe with several cleaners at once.
func PurgeInbox(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error) {
	cutoff := database.Normalize(olderThan)
	return purgeBatches(ctx, db, "inbox rows", batchSize, pause,
		func(db *gorm.DB) ([]inboxRow, error) {
			var rows []inboxRow
			err := db.Select("consumer", "event_id").Where("processed_at < ?", cutoff).
				Order("consumer, event_id").Limit(batchSize).Find(&rows).Error
			return rows, err
		},
		func(tx *gorm.DB, rows []inboxRow) (int64, error) {
			// One statement per consumer (there is one per worker group):
			// "(consumer, event_id) IN" row values are not portable to SQLite.
			byConsumer := map[string][]string{}
			var consumers []string
			for _, r := range rows {
				if _, ok := byConsumer[r.Consumer]; !ok {
					consumers = append(consumers, r.Consumer)
				}
				byConsumer[r.Consumer] = append(byConsumer[r.Consumer], r.EventID)
			}
			var n int64
			for _, consumer := range consumers {
				res := tx.Where("consumer = ? AND event_id IN ? AND processed_at < ?", consumer, byConsumer[consumer], cutoff).
					Delete(&inboxRow{})
				if res.Error != nil {
					return n, res.Error
				}
				n += res.RowsAffected
			}
			return n, nil
		})
}

// PurgePublications deletes PUBLISHED and CANCELLED publications last
// updated (settled) before olderThan, in transactions of at most batchSize
// rows in post_id order, with pause between two. PENDING and FAILED
// publications are kept (see settledPublications). Safe with several
// cleaners at once.
func PurgePublications(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error) {
	cutoff := database.Normalize(olderThan)
	return purgeBatches(ctx, db, "settled publications", batchSize, pause,
		func(db *gorm.DB) ([]int64, error) {
			var ids []int64
			err := db.Model(&publicationRow{}).Where("status IN ? AND updated_at < ?", settledPublications, cutoff).
				Order("post_id").Limit(batchSize).Pluck("post_id", &ids).Error
			return ids, err
		},
		func(tx *gorm.DB, ids []int64) (int64, error) {
			// The condition again: a row retried by an operator meanwhile
			// is PENDING and stays.
			res := tx.Where("post_id IN ? AND status IN ? AND updated_at < ?", ids, settledPublications, cutoff).
				Delete(&publicationRow{})
			return res.RowsAffected, res.Error
		})
}

// purgeBatches deletes rows batch by batch: find reads up to batchSize keys
// of rows to delete (a plain read, no locks), del deletes them in a
// transaction (retried on a deadlock) re-checking the condition, and the
// next batch follows after pause, until a batch comes back short. Deleting
// by primary key in bounded batches keeps each transaction's locks few and
// short (see PITFALLS: large multi-row deletes from several processes
// deadlock).
func purgeBatches[K any](ctx context.Context, db *gorm.DB, what string, batchSize int, pause time.Duration,
	find func(db *gorm.DB) ([]K, error), del func(tx *gorm.DB, keys []K) (int64, error)) (int, error) {
	if batchSize < 1 || batchSize > MaxPurgeBatchSize {
		return 0, fmt.Errorf("purge batch size %d is outside 1..%d", batchSize, MaxPurgeBatchSize)
	}
	if pause < 0 {
		return 0, fmt.Errorf("purge pause %s is negative", pause)
	}
	deleted := 0
	for {
		keys, err := find(db.WithContext(ctx))
		if err != nil {
			return deleted, fmt.Errorf("find %s to purge: %w", what, err)
		}
		if len(keys) == 0 {
			return deleted, nil
		}
		var n int64
		err = database.Transaction(ctx, db, func(tx *gorm.DB) error {
			var err error
			n, err = del(tx, keys)
			return err
		})
		if err != nil {
			return deleted, fmt.Errorf("purge %s: %w", what, err)
		}
		deleted += int(n)
		if len(keys) < batchSize {
			return deleted, nil
		}
		if !backoff.Sleep(ctx, pause) {
			return deleted, ctx.Err()
		}
	}
}

// Start runs the cleaning loop in one goroutine, a run at once and then one
// per Interval, until Stop is called or ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	ctx, done, err := c.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("cleaner: %w", err)
	}
	go func() {
		defer done()
		c.loop(ctx)
	}()
	return nil
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
		switch {
		case err != nil && ctx.Err() != nil:
			log.Info("outbox cleaning interrupted", "deleted", res.Deleted, "inbox_deleted", res.Inbox,
				"publications_deleted", res.Publications)
			return
		case err != nil:
			log.Error("outbox cleaning failed", "err", err, "deleted", res.Deleted, "inbox_deleted", res.Inbox,
				"publications_deleted", res.Publications, "took", took)
		case res.Deleted+res.Inbox+res.Publications > 0:
			log.Info("outbox cleaned", "deleted", res.Deleted, "inbox_deleted", res.Inbox,
				"publications_deleted", res.Publications, "older_than", res.Cutoff, "took", took)
		}
		if !backoff.Sleep(ctx, c.cfg.Interval) {
			return
		}
	}
}
