package overdue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// LeaseName is the lease (database.AcquireLease) whose holder runs the
// check: one instance among those on a database does the work and the
// repairs, the others wait for the lease to fall free.
const LeaseName = "overdue-check"

// Config configures a Checker. Start from DefaultConfig.
type Config struct {
	// Grace is how long past its scheduledAt a post may be neither
	// PUBLISHED, CANCELLED nor EXPIRED before it is overdue. Default 5m;
	// 1s..24h.
	Grace time.Duration
	// Interval is the pause between two checks. Default 30s; 100ms..Grace.
	Interval time.Duration
	// Reannounce is how many times an overdue post's reservation is
	// announced again, at most, when its event was sent but made no
	// publication. DefaultConfig sets 3; 0: never; at most 100.
	Reannounce int
	// BatchSize bounds the posts expired per transaction and re-announced
	// per check. Default 500; 1..10000.
	BatchSize int
	// InstanceID holds the lease. Required.
	InstanceID string
	// Logger receives the loop's logs and an audit line per repair.
	// Default slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called with every check's result and error.
	Observe func(Result, error)
}

// DefaultConfig returns a Config with every field but InstanceID at its
// default: the one place the defaults are written.
func DefaultConfig() Config {
	return Config{Grace: 5 * time.Minute, Interval: 30 * time.Second, Reannounce: 3, BatchSize: 500, Logger: slog.Default()}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "overdue.Config."
	switch {
	case c.Grace < time.Second || c.Grace > 24*time.Hour:
		return config.Invalid(f+"Grace", c.Grace, "want 1s..24h")
	case c.Interval < 100*time.Millisecond || c.Interval > c.Grace:
		return config.Invalid(f+"Interval", c.Interval, "want 100ms..the grace %s", c.Grace)
	case c.Reannounce < 0 || c.Reannounce > 100:
		return config.Invalid(f+"Reannounce", c.Reannounce, "want 0..100")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..10000")
	case c.InstanceID == "":
		return config.Invalid(f+"InstanceID", c.InstanceID, "must be set")
	case c.Logger == nil:
		return config.Invalid(f+"Logger", nil, "must be set")
	}
	return nil
}

// Result is what one check did.
type Result struct {
	// Leader says this instance held the lease and ran the check; the
	// other fields are zero when it did not.
	Leader bool
	// Overdue counts the overdue posts after the check's repairs.
	Overdue int
	// Oldest is how long past its scheduledAt the oldest overdue post is.
	Oldest time.Duration
	// Expired counts the posts the check moved to EXPIRED.
	Expired int
	// Reannounced counts the reservation events the check sent again.
	Reannounced int
}

// Checker keeps the promise of every due post checked: each check, by the
// instance that holds the lease, expires the posts past their publishBy that
// no worker claimed, re-announces the reservations sent but never made a
// publication, and counts the overdue posts.
type Checker struct {
	startstop.BaseStartStop

	db  *gorm.DB
	cfg Config
}

// New returns a Checker on db (a migrated schema). Writes go through db, so
// a db with a commit waker wakes the relay after a repair's commit.
func New(db *gorm.DB, cfg Config) (*Checker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid overdue config: %w", err)
	}
	return &Checker{db: db, cfg: cfg}, nil
}

// Config returns the checker's configuration.
func (c *Checker) Config() Config { return c.cfg }

// leaseTTL is how long the lease outlives its holder's last check: three
// intervals, so a check that runs long does not lose it, and at least 10 s.
func (c *Checker) leaseTTL() time.Duration { return max(3*c.cfg.Interval, 10*time.Second) }

// RunOnce takes or renews the lease and, holding it, runs one check: the
// expiries, the re-announcements, then the count. An instance that does not
// hold the lease does nothing and reports Leader false.
func (c *Checker) RunOnce(ctx context.Context) (Result, error) {
	_, held, err := database.AcquireLease(ctx, c.db, LeaseName, c.cfg.InstanceID, "", c.leaseTTL())
	if err != nil || !held {
		return Result{}, err
	}
	res := Result{Leader: true}
	var errs []error
	if res.Expired, err = c.expire(ctx); err != nil {
		errs = append(errs, err)
	}
	if res.Reannounced, err = c.reannounce(ctx); err != nil {
		errs = append(errs, err)
	}
	sum, err := Count(ctx, c.db, c.cfg.Grace)
	if err != nil {
		errs = append(errs, err)
	}
	res.Overdue, res.Oldest = sum.Count, sum.Oldest
	return res, errors.Join(errs...)
}

// expire moves the posts past their publishBy that no worker claimed to
// EXPIRED, BatchSize per transaction, with their EXPIRED events.
func (c *Checker) expire(ctx context.Context) (int, error) {
	total := 0
	for {
		var n, read int
		err := database.Transaction(ctx, c.db, func(tx *gorm.DB) error {
			now, err := database.Now(ctx, tx)
			if err != nil {
				return err
			}
			var ids []int64
			err = tx.Model(&reservation.Post{}).
				Where("status IN ? AND publish_by < ? AND publish_claimed_at IS NULL", open, now).
				Order("publish_by, id").Limit(c.cfg.BatchSize).Pluck("id", &ids).Error
			if err != nil {
				return fmt.Errorf("find posts past their publishBy: %w", err)
			}
			read = len(ids)
			expired, err := reservation.Expire(tx, ids, now, false)
			n = len(expired)
			if err == nil && n > 0 {
				database.WakeAfterCommit(tx)
			}
			return err
		})
		if err != nil {
			return total, fmt.Errorf("expire posts: %w", err)
		}
		total += n
		if read < c.cfg.BatchSize || n == 0 {
			return total, nil
		}
	}
}

// reannounce announces again the reservation of each overdue WORKING post
// whose every reservation event was SENT more than a grace ago (or purged)
// and that has no publication on this database, at most Reannounce times per
// post. A sent event that a worker consumes makes a publication within
// moments; one that none made within the grace was consumed elsewhere (a
// worker on another database) or not at all.
func (c *Checker) reannounce(ctx context.Context) (int, error) {
	if c.cfg.Reannounce == 0 {
		return 0, nil
	}
	now, err := database.Now(ctx, c.db)
	if err != nil {
		return 0, err
	}
	cutoff := now.Add(-c.cfg.Grace)
	var due []reservation.Post
	err = c.db.WithContext(ctx).Select("id", "reannounced").
		Where("status = ? AND scheduled_at < ? AND reannounced < ?", reservation.StatusWorking, cutoff, c.cfg.Reannounce).
		Where("NOT EXISTS (SELECT 1 FROM publications WHERE publications.post_id = posts.id)").
		Where("NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.aggregate_id = posts.id AND outbox.event_type = ? "+
			"AND (outbox.status <> ? OR outbox.sent_at >= ?))", event.ReservationEvent, outbox.StatusSent, cutoff).
		Order("scheduled_at, id").Limit(c.cfg.BatchSize).Find(&due).Error
	if err != nil {
		return 0, fmt.Errorf("find posts to re-announce: %w", err)
	}
	n := 0
	for _, p := range due {
		var ok bool
		err := database.Transaction(ctx, c.db, func(tx *gorm.DB) error {
			var err error
			if ok, err = reservation.Reannounce(tx, p.ID, p.Reannounced, now); err == nil && ok {
				database.WakeAfterCommit(tx)
			}
			return err
		})
		if err != nil {
			return n, err
		}
		if ok {
			n++
			c.cfg.Logger.Info("audit", "action", "posts.reannounce", "ids", []int64{p.ID}, "source", "overdue-check",
				"instance_id", c.cfg.InstanceID, "reannounced", p.Reannounced+1, "of", c.cfg.Reannounce,
				"reason", string(ReasonNoPublication))
		}
	}
	return n, nil
}

// Start runs a check at once and then one per Interval in one goroutine,
// until Stop or until ctx ends. At the stop it gives the lease up, so that
// another instance takes the check over at once.
func (c *Checker) Start(ctx context.Context) error {
	return c.StartLoop(ctx, "overdue check", c.loop)
}

// Stop ends the loop and waits for it. It is safe to call twice and
// without Start.
func (c *Checker) Stop() { c.BaseStartStop.Stop() }

func (c *Checker) loop(ctx context.Context) {
	log := c.cfg.Logger.With("component", "overdue_check")
	log.Info("overdue check started", "grace", c.cfg.Grace, "interval", c.cfg.Interval, "reannounce", c.cfg.Reannounce)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := database.ReleaseLease(rctx, c.db, LeaseName, c.cfg.InstanceID); err != nil {
			log.Warn("overdue check lease not released; another instance takes it after its expiry", "err", err)
		}
		log.Info("overdue check stopped")
	}()
	var was Result
	for {
		res, err := c.RunOnce(ctx)
		if c.cfg.Observe != nil {
			c.cfg.Observe(res, err)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			log.Error("overdue check failed", "err", err)
		case res.Leader != was.Leader && res.Leader:
			log.Info("overdue check taken on by this instance", "instance_id", c.cfg.InstanceID)
		}
		if res.Expired > 0 {
			log.Info("posts expired past their publishBy", "expired", res.Expired)
		}
		if res.Leader && res.Overdue > 0 && (res.Overdue != was.Overdue || was.Oldest/time.Minute != res.Oldest/time.Minute) {
			log.Warn("overdue posts: see posting posts overdue", "overdue", res.Overdue, "oldest", res.Oldest.Round(time.Second))
		}
		if err == nil {
			was = res
		}
		if !backoff.Sleep(ctx, c.cfg.Interval) {
			return
		}
	}
}
