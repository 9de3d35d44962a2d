package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// SchedulerConfig configures the reservation job. Zero fields take the
// defaults of the contract.
type SchedulerConfig struct {
	// Spec is the robfig/cron/v3 schedule of the job, in the standard five-field syntax or a descriptor such as "@every 30s".
	// Default "@every 1m".
	Spec string
	// Lead is how far ahead of scheduledAt a post becomes WORKING. Default
	// 5m; more than 0, at most 24h.
	Lead time.Duration
	// BatchSize is the number of due posts a run reads with its first query
	// and marks in its first transaction. Default 100; 1..1000.
	BatchSize int
	// MaxBatchSize is what a run's batch grows to: it doubles after each
	// batch that came back full, so posts due together (a spike on the
	// hour) are marked in fewer, larger transactions, while a run of a few
	// due posts keeps its transactions, and the row locks they hold, small.
	// Default 1000; BatchSize..1000.
	MaxBatchSize int
	// MaxPerRun bounds the posts one run reads, so a huge backlog is worked
	// off over several runs instead of one endless one. Default 10000; at
	// least BatchSize.
	MaxPerRun int
	// Now is the clock that decides which posts are due, and the time of
	// their updated_at and reservation event. Default: the database's clock
	// (database.Now), which every instance shares: scheduledAt is compared
	// by the worker against the database's clock too, and a scheduler whose
	// host clock ran ahead would mark posts WORKING (no longer editable)
	// early. Tests set it.
	Now func() time.Time
	// Logger receives the job's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes each run's span, "reservation run", a new trace,
	// and per marked post a "reserve post" span, a child of the trace of the
	// request that created or last edited the post (posts.traceparent) and
	// linked to the run, whose context the post's reservation event carries:
	// the publication continues the request's trace. A post without a
	// traceparent gets the run's context instead. Default: the no-op
	// provider (the events carry the post's traceparent as it is, or the
	// run's fresh trace id).
	TracerProvider trace.TracerProvider
	// Observe, if set, is called with every scheduled run's result, duration
	// and error (for metrics). RunOnce called directly does not call it.
	Observe func(SchedulerResult, time.Duration, error)
}

// DefaultSchedulerConfig returns a SchedulerConfig with Spec, Lead,
// BatchSize, MaxPerRun and Logger at their defaults: the one place the
// defaults are written. A caller that takes values from elsewhere (a command
// line) starts from it, so that a zero it was given is refused by Validate
// rather than replaced.
func DefaultSchedulerConfig() SchedulerConfig {
	return SchedulerConfig{Spec: "@every 1m", Lead: 5 * time.Minute, BatchSize: 100, MaxBatchSize: 1000, MaxPerRun: 10000, Logger: slog.Default(),
		TracerProvider: noop.NewTracerProvider()}
}

func (c SchedulerConfig) withDefaults() SchedulerConfig {
	config.FillZero(&c, DefaultSchedulerConfig())
	return c
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c SchedulerConfig) Validate() error {
	const f = "reservation.SchedulerConfig."
	if _, err := cron.ParseStandard(c.Spec); err != nil {
		return config.Invalid(f+"Spec", c.Spec, "%w", err)
	}
	switch {
	case c.Lead <= 0 || c.Lead > 24*time.Hour:
		return config.Invalid(f+"Lead", c.Lead, "outside (0, 24h]")
	case c.BatchSize < 1 || c.BatchSize > 1000:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..1000")
	case c.MaxBatchSize < c.BatchSize || c.MaxBatchSize > 1000:
		return config.Invalid(f+"MaxBatchSize", c.MaxBatchSize, "want the batch size %d..1000", c.BatchSize)
	case c.MaxPerRun < c.BatchSize:
		return config.Invalid(f+"MaxPerRun", c.MaxPerRun, "below the batch size %d", c.BatchSize)
	case c.Logger == nil:
		return config.Invalid(f+"Logger", nil, "must be set")
	}
	return nil
}

// SchedulerResult counts what one run did.
type SchedulerResult struct {
	// Marked posts became WORKING with their reservation event.
	Marked int
	// Skipped posts lost a race: changed, rescheduled or cancelled since
	// they were read, or already marked by another scheduler.
	Skipped int
	// Failed posts could not be marked for another reason; they stay
	// RESERVED and the next run tries again.
	Failed int
	// More says the run stopped at MaxPerRun: due posts may be left, and
	// the scheduler runs again at once instead of at its next tick.
	More bool
}

// Scheduler is the reservation job: RESERVED posts due within the lead time
// become WORKING, each with exactly one POSTING_RESERVATION_EVENT written in
// the same transaction. Any number of schedulers, in any number of
// processes, may run on one database.
type Scheduler struct {
	startstop.BaseStartStop

	db  *gorm.DB
	cfg SchedulerConfig
}

// NewScheduler returns a scheduler on db.
func NewScheduler(db *gorm.DB, cfg SchedulerConfig) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid scheduler config: %w", err)
	}
	return &Scheduler{db: db, cfg: cfg}, nil
}

// Config returns the scheduler's configuration with defaults filled in.
func (s *Scheduler) Config() SchedulerConfig { return s.cfg }

// RunOnce marks the due posts, oldest scheduledAt first, batch by batch,
// until none is left or MaxPerRun posts were read. The first batch is
// BatchSize posts; each that comes back full doubles the next, up to
// MaxBatchSize. Overdue posts (the service
// was down at their time) are due too. A post that cannot be marked does not
// stop the others: it is counted, and the first such error is returned with
// the counts after the run.
//
// A batch is one transaction of three statements (more on SQLite): a locking
// read of the next due posts (FOR UPDATE SKIP LOCKED on MySQL and
// PostgreSQL, so concurrent schedulers take disjoint batches instead of
// waiting for each other; SQLite has one writer, whose transaction begins
// IMMEDIATE), one UPDATE that marks them WORKING, and one multi-row INSERT
// of their reservation events (on SQLite one per 50 events,
// database.InsertMany).
func (s *Scheduler) RunOnce(ctx context.Context) (SchedulerResult, error) {
	ctx, span := s.tracer().Start(ctx, "reservation run", trace.WithNewRoot())
	defer span.End()
	ctx = telemetry.EnsureTrace(ctx)
	var res SchedulerResult
	now, err := s.now(ctx)
	if err != nil {
		return res, err
	}
	horizon := now.Add(s.cfg.Lead)
	var (
		after    *Post // keyset cursor: skipped and failed posts stay RESERVED
		failures []error
	)
	size := s.cfg.BatchSize
	for read := 0; read < s.cfg.MaxPerRun; {
		limit := min(size, s.cfg.MaxPerRun-read)
		due, b, errs, err := s.markNext(ctx, after, horizon, limit, now)
		if err != nil {
			return res, errors.Join(err, errors.Join(failures...))
		}
		if len(due) == 0 {
			break
		}
		res.Marked += b.Marked
		res.Skipped += b.Skipped
		res.Failed += b.Failed
		failures = append(failures, errs...)
		if err := ctx.Err(); err != nil {
			return res, err
		}
		read += len(due)
		after = &due[len(due)-1]
		if len(due) < limit {
			break
		}
		size = min(2*size, s.cfg.MaxBatchSize)
		res.More = read >= s.cfg.MaxPerRun
	}
	if len(failures) > 0 {
		return res, fmt.Errorf("%d posts could not be marked, first: %w", len(failures), failures[0])
	}
	return res, nil
}

// tracer makes the run's and the reservations' spans.
func (s *Scheduler) tracer() trace.Tracer {
	return s.cfg.TracerProvider.Tracer(telemetry.ScopeName + "/reservation")
}

// now reads the scheduler's clock: Config.Now, or the database's.
func (s *Scheduler) now(ctx context.Context) (time.Time, error) {
	if s.cfg.Now != nil {
		return database.Normalize(s.cfg.Now()), nil
	}
	return database.Now(ctx, s.db)
}

// markNext marks the next batch of at most limit posts due by horizon after
// the cursor, in one transaction, and returns the posts it read. Posts whose
// UPDATE matched nothing lost a race and are skipped inside the batch. Any
// other error after the read (a duplicate reservation event, a bad row, a
// lock wait that outlasted the retries) rolls the whole batch back, and its
// posts are then marked one transaction each, so that only the culprit
// fails; those errors come back in errs. err is a failed read: nothing was
// marked.
func (s *Scheduler) markNext(ctx context.Context, after *Post, horizon time.Time, limit int, now time.Time) (
	due []Post, res SchedulerResult, errs []error, err error,
) {
	read := false
	// READ COMMITTED on MySQL: under REPEATABLE READ a short batch's read,
	// which runs on past the last due post, keeps a lock on the gap after
	// it, where a post marked WORKING lands, and other instances' marks
	// would wait for this batch's commit. It also lets go of the rows the
	// read passes over and does not return (posts past their publishBy).
	var opts []*sql.TxOptions
	if rc := database.DriverOf(s.db).ReadCommitted(); rc != nil {
		opts = append(opts, rc)
	}
	err = database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		due, res, read = nil, SchedulerResult{}, false // a retried attempt starts afresh
		drv := database.DriverOf(tx)
		q := tx.Select("id", "scheduled_at", "version", "owner_id", "traceparent").Where("status = ? AND scheduled_at <= ?", StatusReserved, horizon).
			// A post past its deadline is the expirer's: it becomes EXPIRED,
			// never WORKING.
			Where("publish_by IS NULL OR publish_by >= ?", now)
		if after != nil {
			q = q.Where(drv.After("scheduled_at", "id", after.ScheduledAt, after.ID))
		}
		// Through the index of the order, so that the read locks the
		// posts it returns and no due post before the cursor, which
		// another runner would then pass over (Driver.ThroughIndex).
		q = drv.ForUpdateSkipLocked(q.Table(drv.ThroughIndex("posts", "idx_posts_status_scheduled_at_id")))
		if err := q.Order("scheduled_at, id").Limit(limit).Find(&due).Error; err != nil {
			return fmt.Errorf("find due posts: %w", err)
		}
		read = true
		if len(due) == 0 {
			return nil
		}
		marked, err := markPosts(ctx, s.tracer(), tx, due, now)
		if err != nil {
			return err
		}
		res = SchedulerResult{Marked: len(marked), Skipped: len(due) - len(marked)}
		return nil
	}, opts...)
	switch {
	case err == nil:
		return due, res, nil, nil
	case !read || len(due) == 0:
		return nil, SchedulerResult{}, nil, err
	case ctx.Err() != nil:
		return due, SchedulerResult{}, nil, nil
	}
	res = SchedulerResult{}
	for i := range due {
		var ok bool
		err := database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
			var err error
			ok, err = markPost(ctx, s.tracer(), tx, &due[i], now)
			return err
		})
		switch {
		case err == nil && ok:
			res.Marked++
		case err == nil, errors.Is(err, outbox.ErrDuplicate):
			res.Skipped++
		case ctx.Err() != nil:
			return due, res, errs, nil
		default:
			res.Failed++
			errs = append(errs, err)
		}
	}
	return due, res, errs, nil
}

// markPosts moves posts RESERVED → WORKING in one UPDATE through tx and
// appends their reservation events in one multi-row INSERT (on SQLite one
// per 50 events, outbox.AppendMany), returning the posts it marked. The
// UPDATE matches a post only at the version and status that were read, so a
// post changed since (which the locking read makes impossible on MySQL and
// PostgreSQL, and SQLite's single writer on SQLite, but a writer in the same
// transaction or a database without the lock could still do) is left out;
// the events' dedup keys are the database-level guard that a post never gets
// two reservation events. ctx is the run's: each event's trace context comes
// from reservationTrace.
func markPosts(ctx context.Context, tracer trace.Tracer, tx *gorm.DB, posts []Post, now time.Time) (_ []Post, err error) {
	pairs := make([]database.Pair, len(posts))
	for i := range posts {
		pairs[i] = database.Pair{First: posts[i].ID, Second: posts[i].Version.Int64}
	}
	// PairsIn: on PostgreSQL two arrays unnested, where a row-value IN of
	// 1,000 pairs took more time to plan than the UPDATE took to run. By
	// primary key (Driver.ThroughIndex): MariaDB may otherwise scan the
	// table for a batch that is a good part of it, and wait for every post
	// another runner's batch holds.
	drv := database.DriverOf(tx)
	upd := tx.Exec("UPDATE "+drv.ThroughIndex("posts", "PRIMARY")+" SET status = ?, version = version + 1, updated_at = ? WHERE status = ? AND ?",
		StatusWorking, now, StatusReserved, drv.PairsIn("id", "version", pairs))
	if upd.Error != nil {
		return nil, fmt.Errorf("mark %d posts working: %w", len(posts), upd.Error)
	}
	marked := posts
	if int(upd.RowsAffected) != len(posts) {
		// Some lost a race: the marked ones are WORKING one version on.
		var err error
		if marked, err = markedOf(tx, posts); err != nil {
			return nil, err
		}
	}
	evs := make([]outbox.Event, len(marked))
	var spans []trace.Span
	defer func() {
		for _, sp := range spans {
			if err != nil {
				sp.SetStatus(codes.Error, err.Error())
			}
			sp.End()
		}
	}()
	for i := range marked {
		ev, err := reservationEvent(&marked[i], now)
		if err != nil {
			return nil, err
		}
		tp, sp := reservationTrace(ctx, tracer, &marked[i], ev.ID)
		if sp != nil {
			spans = append(spans, sp)
		}
		ev.Traceparent = tp
		evs[i] = ev
	}
	if _, err := outbox.AppendMany(tx, evs); err != nil {
		return nil, fmt.Errorf("append %d reservation events: %w", len(evs), err)
	}
	return marked, nil
}

// markedOf returns those of posts, in their order, that the transaction tx
// marked: WORKING at one version past the one read.
func markedOf(tx *gorm.DB, posts []Post) ([]Post, error) {
	ids := make([]int64, len(posts))
	for i, p := range posts {
		ids[i] = p.ID
	}
	var rows []Post
	if err := tx.Select("id", "version", "status").Where("id IN ?", ids).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read marked posts: %w", err)
	}
	current := make(map[int64]Post, len(rows))
	for _, p := range rows {
		current[p.ID] = p
	}
	var marked []Post
	for _, p := range posts {
		if c, ok := current[p.ID]; ok && c.Status == StatusWorking && c.Version.Int64 == p.Version.Int64+1 {
			marked = append(marked, p)
		}
	}
	return marked, nil
}

// reservationEvent is p's POSTING_RESERVATION_EVENT, occurring at now, with
// the dedup key that admits one per post.
func reservationEvent(p *Post, now time.Time) (outbox.Event, error) {
	e, err := event.New(event.ReservationEvent, p.ID, now, event.ReservationEventFields{ScheduledAt: database.Normalize(p.ScheduledAt), OwnerID: p.OwnerID})
	if err != nil {
		return outbox.Event{}, err
	}
	return OutboxEvent(e, event.ReservationDedupKey(p.ID)), nil
}

// markPost moves p RESERVED → WORKING and appends its reservation event
// through tx, reporting false when p changed since it was read: the batch's
// fallback, one post per transaction, after its transaction failed.
func markPost(ctx context.Context, tracer trace.Tracer, tx *gorm.DB, p *Post, now time.Time) (_ bool, err error) {
	res := tx.Exec("UPDATE posts SET status = ?, version = version + 1, updated_at = ? WHERE id = ? AND version = ? AND status = ?",
		StatusWorking, now, p.ID, p.Version.Int64, StatusReserved)
	if res.Error != nil {
		return false, fmt.Errorf("mark post %d working: %w", p.ID, res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	ev, err := reservationEvent(p, now)
	if err != nil {
		return false, fmt.Errorf("post %d: %w", p.ID, err)
	}
	tp, sp := reservationTrace(ctx, tracer, p, ev.ID)
	if sp != nil {
		defer func() {
			if err != nil {
				sp.SetStatus(codes.Error, err.Error())
			}
			sp.End()
		}()
	}
	ev.Traceparent = tp
	if _, err := outbox.Append(tx, ev); err != nil {
		return false, fmt.Errorf("post %d: %w", p.ID, err)
	}
	return true, nil
}

// Start runs the job on its cron schedule in the background until Stop or
// until ctx ends. A run still going when the next tick comes is skipped, not
// doubled. It fails if the scheduler was started or stopped before.
func (s *Scheduler) Start(ctx context.Context) error {
	// Stop ends runCtx: cancelling ends a running job at once, every
	// transaction it has not committed rolls back, leaving its posts
	// RESERVED for the next run, so nothing is half done.
	runCtx, done, err := s.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	log := s.cfg.Logger.With("component", "scheduler")
	c := cron.New(cron.WithChain(cron.SkipIfStillRunning(cronLogger{log})))
	if _, err := c.AddFunc(s.cfg.Spec, func() { s.run(runCtx, log) }); err != nil {
		done() // cannot happen after NewScheduler checked the spec
		return fmt.Errorf("schedule %q: %w", s.cfg.Spec, err)
	}
	c.Start()
	log.Info("scheduler started", "spec", s.cfg.Spec, "lead", s.cfg.Lead, "batch_size", s.cfg.BatchSize, "max_batch_size", s.cfg.MaxBatchSize)
	go func() {
		defer done()
		<-runCtx.Done()
		<-c.Stop().Done()
		log.Info("scheduler stopped")
	}()
	return nil
}

// run is one tick of the schedule: runs of at most MaxPerRun posts, one
// after the other while a run stops at that bound, so that a spike of posts
// due together is reserved at the database's pace, not MaxPerRun per tick
// (10,000 a minute by default: a 100,000-post spike would not be reserved
// within the lead).
func (s *Scheduler) run(ctx context.Context, log *slog.Logger) {
	for s.runOnce(ctx, log) && ctx.Err() == nil {
	}
}

// runOnce is one run of the job, observed and logged; it reports whether
// another should follow at once: the run stopped at MaxPerRun, and it either
// went well or marked some posts. Posts it could not mark (a bad row, which
// stays RESERVED and is read again first by every run) fail the run but do
// not stop the tick while others are being marked; a run that marked none
// ends the tick, so posts that all fail are not retried in a loop.
func (s *Scheduler) runOnce(ctx context.Context, log *slog.Logger) bool {
	if ctx.Err() != nil {
		return false
	}
	start := time.Now()
	res, err := s.RunOnce(ctx)
	elapsed := time.Since(start)
	if s.cfg.Observe != nil {
		s.cfg.Observe(res, elapsed, err)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		log.Info("reservation run interrupted by stop", "marked", res.Marked, "skipped", res.Skipped, "failed", res.Failed)
	case err != nil:
		log.Error("reservation run failed", "err", err, "marked", res.Marked, "skipped", res.Skipped, "failed", res.Failed, "duration", elapsed)
	case res.Marked > 0 || res.Skipped > 0:
		log.Info("reservation run", "marked", res.Marked, "skipped", res.Skipped, "duration", elapsed, "more", res.More)
	}
	return res.More && (err == nil || res.Marked > 0)
}

// Stop stops the schedule, interrupts a running job and waits until it has
// returned. It is safe to call twice and without Start.
func (s *Scheduler) Stop() { s.BaseStartStop.Stop() }

// cronLogger lets cron report a skipped tick through the scheduler's logger.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) {
	if msg == "skip" {
		l.log.Info("reservation run skipped: the previous one is still going")
	}
}

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append([]any{"err", err}, kv...)...)
}
