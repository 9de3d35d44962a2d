package reservation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/outbox"
)

// SchedulerConfig configures the reservation job. Zero fields take defaults.
type SchedulerConfig struct {
	// Spec is the robfig/cron/v3 schedule (POSTING_SCHEDULER_SPEC). Default "@every 1m".
	Spec string
	// Lead is how far ahead of scheduledAt a post becomes WORKING
	// (POSTING_RESERVATION_LEAD). Default 5m; more than 0, at most 24h.
	Lead time.Duration
	// BatchSize is the number of due posts read per query. Default 100; 1..1000.
	BatchSize int
	// MaxPerRun bounds the posts one run handles, so a huge backlog is worked
	// off over several runs. Default 10000; at least BatchSize.
	MaxPerRun int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the job's logs. Default slog.Default().
	Logger *slog.Logger
	// Observe, if set, gets every run's result and duration (for metrics).
	Observe func(SchedulerResult, time.Duration, error)
}

func (c SchedulerConfig) withDefaults() SchedulerConfig {
	if c.Spec == "" {
		c.Spec = "@every 1m"
	}
	if c.Lead == 0 {
		c.Lead = 5 * time.Minute
	}
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	if c.MaxPerRun == 0 {
		c.MaxPerRun = 10000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first setting out of its limits.
func (c SchedulerConfig) Validate() error {
	if _, err := cron.ParseStandard(c.Spec); err != nil {
		return fmt.Errorf("spec %q: %w", c.Spec, err)
	}
	switch {
	case c.Lead <= 0 || c.Lead > 24*time.Hour:
		return fmt.Errorf("lead %s is outside (0, 24h]", c.Lead)
	case c.BatchSize < 1 || c.BatchSize > 1000:
		return fmt.Errorf("batch size %d is outside 1..1000", c.BatchSize)
	case c.MaxPerRun < c.BatchSize:
		return fmt.Errorf("max per run %d is below the batch size %d", c.MaxPerRun, c.BatchSize)
	}
	return nil
}

// SchedulerResult counts what one run did.
type SchedulerResult struct {
	// Marked posts became WORKING with their reservation event.
	Marked int
	// Skipped posts lost a race: changed or cancelled since they were read,
	// or already marked by another scheduler.
	Skipped int
	// Failed posts could not be marked for another reason; the next run tries again.
	Failed int
}

// Scheduler is the reservation job: RESERVED posts due within the lead time
// become WORKING, each with exactly one POSTING_RESERVATION_EVENT written in
// the same transaction. Any number of schedulers may run on one database.
type Scheduler struct {
	db  *gorm.DB
	cfg SchedulerConfig

	mu      sync.Mutex
	cron    *cron.Cron
	stopped bool
}

// NewScheduler returns a scheduler on db.
func NewScheduler(db *gorm.DB, cfg SchedulerConfig) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid scheduler config: %w", err)
	}
	return &Scheduler{db: db, cfg: cfg}, nil
}

// RunOnce marks every due post, batch by batch, until none is left or
// MaxPerRun is reached. Overdue posts (the service was down at their time)
// are due too. Each post is its own short transaction, so one bad row cannot
// block the rest and a lost race costs nothing but a skip.
func (s *Scheduler) RunOnce(ctx context.Context) (SchedulerResult, error) {
	var res SchedulerResult
	now := outbox.Normalize(s.cfg.Now())
	horizon := now.Add(s.cfg.Lead)
	afterID := int64(0)
	var errs []error
	for handled := 0; handled < s.cfg.MaxPerRun; {
		var due []Post
		err := s.db.WithContext(ctx).
			Where("status = ? AND scheduled_at <= ? AND id > ?", StatusReserved, horizon, afterID).
			Order("id").Limit(s.cfg.BatchSize).Find(&due).Error
		if err != nil {
			return res, fmt.Errorf("find due posts: %w", err)
		}
		for i := range due {
			switch err := s.mark(ctx, &due[i], now); {
			case err == nil:
				res.Marked++
			case errors.Is(err, ErrConflict), errors.Is(err, outbox.ErrDuplicate):
				res.Skipped++
			case ctx.Err() != nil:
				return res, ctx.Err()
			default:
				res.Failed++
				errs = append(errs, err)
			}
			afterID = due[i].ID
		}
		handled += len(due)
		if len(due) < s.cfg.BatchSize {
			break
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("%d posts could not be marked, first: %w", len(errs), errs[0])
	}
	return res, nil
}

// mark moves one post RESERVED → WORKING and appends its reservation event in
// one transaction. The UPDATE is version- and status-checked, so a cancel or
// reschedule that committed since the read makes it match nothing; the
// event's dedup key is the database-level guard that a post never gets two
// reservation events, whatever the number of schedulers.
func (s *Scheduler) mark(ctx context.Context, p *Post, now time.Time) error {
	return database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		res := tx.Model(&Post{}).
			Where("id = ? AND version = ? AND status = ?", p.ID, p.Version.Int64, StatusReserved).
			Updates(map[string]any{
				"status":     StatusWorking,
				"updated_at": now,
				"version":    gorm.Expr("version + 1"),
			})
		if res.Error != nil {
			return fmt.Errorf("mark post %d working: %w", p.ID, res.Error)
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: post %d changed since it was read", ErrConflict, p.ID)
		}
		_, err := outbox.Append(tx, outbox.Event{
			Type:       outbox.ReservationEvent,
			PostID:     p.ID,
			OccurredAt: now,
			Fields:     ReservationEventFields{ScheduledAt: outbox.Normalize(p.ScheduledAt)},
			DedupKey:   ReservationDedupKey(p.ID),
		})
		return err
	})
}

// Start runs the job on its cron schedule until Stop or until ctx ends. A run
// still going when the next tick comes is skipped, not doubled.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cron != nil || s.stopped {
		return errors.New("scheduler already started")
	}
	log := s.cfg.Logger.With("component", "scheduler")
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(s.cfg.Spec, func() { s.run(ctx, log) }); err != nil {
		return fmt.Errorf("schedule %q: %w", s.cfg.Spec, err)
	}
	s.cron = c
	c.Start()
	go func() {
		<-ctx.Done()
		s.Stop()
	}()
	return nil
}

func (s *Scheduler) run(ctx context.Context, log *slog.Logger) {
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	res, err := s.RunOnce(ctx)
	if s.cfg.Observe != nil {
		s.cfg.Observe(res, time.Since(start), err)
	}
	switch {
	case err != nil:
		log.Error("reservation run failed", "err", err, "marked", res.Marked, "skipped", res.Skipped, "failed", res.Failed)
	case res.Marked > 0 || res.Skipped > 0:
		log.Info("reservation run", "marked", res.Marked, "skipped", res.Skipped, "duration", time.Since(start))
	}
}

// Stop stops the schedule and waits for a running job. It is safe to call
// twice and without Start.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	c := s.cron
	s.cron, s.stopped = nil, true
	s.mu.Unlock()
	if c != nil {
		<-c.Stop().Done()
	}
}
