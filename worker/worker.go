// Package worker is the downstream consumer of posting-events: it publishes
// each reserved post at its scheduledAt, WORKING → PUBLISHED, and never
// twice.
//
// A POSTING_RESERVATION_EVENT is processed effectively once: its inbox row
// and a PENDING publication (post, event, Kafka partition, scheduledAt) commit
// in one transaction, and only then does the consumer commit the offset. The
// worker then arms a timer for the publication. Timers live in memory, but
// the publications table does not: when a worker is assigned a partition
// (at start, or after a rebalance) it re-arms every PENDING publication of
// that partition, and when a partition is revoked it disarms them and waits
// for a publication in progress, so no pending publication is lost and two
// workers never hold the same one. A POSTING_EVENT CANCELLED settles a
// pending publication as CANCELLED; a publication whose post turns out
// CANCELLED when its time comes is not published either.
//
// Timers run on the worker's clock, shifted by its difference from the
// database's clock as last read, so a worker whose clock runs behind does
// not publish late; and a publication is taken only when it is due by the
// database's clock (database.Now), so a worker whose clock runs ahead never
// publishes early: it waits the time left. The worker owns
// the retry schedule and asks its Publisher for one attempt at a time; an
// attempt holds one of Concurrency slots, a wait holds none. Every
// SweepInterval the worker also arms the PENDING publications of its
// partitions that have no timer, such as a FAILED one an operator set back
// to PENDING.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/internal/backoff"
	"github.com/postingsvc/posting/internal/startstop"
	"github.com/postingsvc/posting/reservation"
)

// DefaultConsumer is the worker's name in the inbox table, the consumer
// group's default.
const DefaultConsumer = "posting-worker"

// Outcomes of consumed events, as given to Config.ObserveConsumed.
const (
	OutcomeProcessed = "processed"
	OutcomeDuplicate = "duplicate"
)

// Outcomes of settled publications, as given to Config.ObserveSettled.
const (
	OutcomePublished = "published" // the post is PUBLISHED
	OutcomeCancelled = "cancelled" // the post was cancelled (or deleted) first
	OutcomeFailed    = "failed"    // refused for good; the post stays WORKING
)

// DefaultConcurrency is Config.Concurrency's default. A slot is held only
// while one attempt runs (a few queries and at most one webhook request of
// WebhookConfig.Timeout), never while a publication waits, so slots are
// cheap: 64 keeps a minute's spike of posts flowing even while dozens of
// receivers hang for their whole timeout, and stays well below what one
// process can have in flight (database work still queues on the pool).
const DefaultConcurrency = 64

// MaxConcurrency is the upper limit of Config.Concurrency.
const MaxConcurrency = 256

// Config configures a Worker. Zero fields take defaults.
type Config struct {
	// Consumer is the worker's name in the inbox table; workers of one
	// consumer group must share it. Default "posting-worker".
	Consumer string
	// Publisher makes posts public. Default RecordOnly, logging to Logger.
	Publisher Publisher
	// Concurrency bounds the publication attempts in progress at once: an
	// attempt holds a slot while it reads the post, makes one publisher
	// call (one webhook request) and records the result, never while it
	// waits for its time or for its next try. Default DefaultConcurrency
	// (64); 1 to MaxConcurrency (256).
	Concurrency int
	// RetryBase is the pause before trying a publication again after a
	// database error or a publisher's passing failure, doubled per failure
	// up to RetryMax. Default 1s.
	RetryBase time.Duration
	// RetryMax caps that pause. Default 1m; at least RetryBase. A pause the
	// publisher asks for (RetryLaterError) may be longer.
	RetryMax time.Duration
	// SweepInterval is how often the worker arms the PENDING publications
	// of its partitions that have no timer: rows an operator set back to
	// PENDING (a retry of a FAILED publication). Default 30s; 10ms to 1h.
	SweepInterval time.Duration
	// Now is the worker's own clock, for its timers only (shifted by its
	// difference from the database's clock): whether a publication is due,
	// and the times written to the database, come from the database's
	// clock (database.Now). Default time.Now.
	Now func() time.Time
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// ObserveConsumed, if set, is told of every event the worker handled:
	// OutcomeProcessed or OutcomeDuplicate (a redelivery the inbox knew).
	ObserveConsumed func(eventType, outcome string)
	// ObservePublished, if set, is told of every post the worker published,
	// with how long after its scheduledAt.
	ObservePublished func(lag time.Duration)
	// ObserveSettled, if set, is told of every publication this worker
	// settled: OutcomePublished, OutcomeCancelled or OutcomeFailed.
	ObserveSettled func(outcome string)
}

// DefaultConfig returns a Config with every field but Publisher and the
// observers at its default: the one place the defaults are written. A caller
// that takes values from elsewhere (a command line) starts from it, so that
// a zero it was given is refused by Validate rather than replaced.
func DefaultConfig() Config {
	return Config{
		Consumer:      DefaultConsumer,
		Concurrency:   DefaultConcurrency,
		RetryBase:     time.Second,
		RetryMax:      time.Minute,
		SweepInterval: 30 * time.Second,
		Now:           time.Now,
		Logger:        slog.Default(),
	}
}

func (c *Config) setDefaults() {
	config.FillZero(c, DefaultConfig())
	if c.Publisher == nil {
		c.Publisher = RecordOnly{Logger: c.Logger}
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "worker.Config."
	switch {
	case c.Consumer == "" || len(c.Consumer) > 100:
		return config.Invalid(f+"Consumer", c.Consumer, "want 1 to 100 characters")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return config.Invalid(f+"Concurrency", c.Concurrency, "want 1 to %d", MaxConcurrency)
	case c.RetryBase <= 0:
		return config.Invalid(f+"RetryBase", c.RetryBase, "must be positive")
	case c.RetryMax < c.RetryBase:
		return config.Invalid(f+"RetryMax", c.RetryMax, "below the retry base %s", c.RetryBase)
	case c.SweepInterval < 10*time.Millisecond || c.SweepInterval > time.Hour:
		return config.Invalid(f+"SweepInterval", c.SweepInterval, "want 10ms to 1h")
	}
	return nil
}

// Worker handles posting-events (it is an inbox.PartitionHandler for
// kafka.Consumer) and publishes posts at their time.
type Worker struct {
	db  *gorm.DB
	cfg Config
	log *slog.Logger
	sem chan struct{} // one token per publication attempt in progress

	base   context.Context // ends at Stop: every timer's publication stops
	cancel context.CancelFunc

	// skew is the database's clock minus the worker's (nanoseconds), as
	// last read: timers are set on the worker's clock, shifted by it, so a
	// worker whose clock runs behind does not publish late by its lag.
	skew atomic.Int64

	mu      sync.Mutex
	armed   map[int64]*timer   // by post id
	owned   map[int32]struct{} // partitions assigned and not revoked
	stopped bool
	// sweep is the sweep loop's lifecycle, started at the first assignment.
	sweep startstop.BaseStartStop
}

// timer is one armed publication.
type timer struct {
	pub    Publication
	t      *time.Timer
	cancel context.CancelFunc
	done   chan struct{} // closed once the timer can no longer act
}

// New returns a worker on db, which holds the posts, inbox and publications
// tables.
func New(db *gorm.DB, cfg Config) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid worker config: %w", err)
	}
	base, cancel := context.WithCancel(context.Background())
	return &Worker{db: db, cfg: cfg, log: cfg.Logger.With("component", "worker"),
		sem: make(chan struct{}, cfg.Concurrency), base: base, cancel: cancel,
		armed: map[int64]*timer{}, owned: map[int32]struct{}{}}, nil
}

// Config returns the worker's configuration with defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Handle processes one event effectively once: the inbox row and the
// event's effect on the publications table commit together, so a
// redelivered event changes nothing in the database. A reservation schedules the post's
// publication and arms its timer; a CANCELLED posting event settles a
// pending publication as CANCELLED and disarms it; other posting events
// are only recorded.
func (w *Worker) Handle(ctx context.Context, ev inbox.Event) error {
	// The inbox and publication times are compared with the database's
	// clock by others (the cleaner's retention cutoff), so they are its.
	now, err := w.dbNow(ctx)
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
	var (
		effect    func(tx *gorm.DB) error
		after     func()
		cancelled bool // the effect settled a pending publication CANCELLED
	)
	switch ev.Type {
	case event.ReservationEvent:
		var f event.ReservationEventFields
		if err := ev.Fields(&f); err != nil {
			return err
		}
		if f.ScheduledAt.IsZero() {
			return fmt.Errorf("%w: reservation event %s has no scheduledAt", inbox.ErrMalformed, ev.EventID)
		}
		pub := Publication{PostID: ev.PostID, EventID: ev.EventID, PartitionID: ev.Partition,
			ScheduledAt: database.Normalize(f.ScheduledAt), Status: PublicationPending, CreatedAt: now, UpdatedAt: now}
		effect = func(tx *gorm.DB) error {
			// A post has one reservation event (its dedup key), so a row for
			// the post is this event's, written before.
			return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&pub).Error
		}
		after = func() { w.arm(pub, false) }
	case event.PostingEvent:
		var f event.PostingEventFields
		if err := ev.Fields(&f); err != nil {
			return err
		}
		if f.Action != event.ActionCancelled {
			break
		}
		effect = func(tx *gorm.DB) error {
			var err error
			cancelled, err = settle(tx, ev.PostID, PublicationCancelled, now, nil)
			return err
		}
		after = func() { w.disarm(ev.PostID) }
	}
	dup, err := inbox.Process(ctx, w.db, w.cfg.Consumer, ev, now, func(tx *gorm.DB) error {
		if effect == nil {
			return nil
		}
		return effect(tx)
	})
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
	outcome := OutcomeProcessed
	if dup {
		outcome = OutcomeDuplicate
	}
	// Also after a duplicate: the first delivery's commit may have
	// succeeded with its answer lost, leaving no timer. Arming is a no-op
	// for an armed post, and PublishDue reads the publication's state.
	if after != nil {
		after()
	}
	if cancelled {
		w.observeSettled(PublicationCancelled)
	}
	if w.cfg.ObserveConsumed != nil {
		w.cfg.ObserveConsumed(string(ev.Type), outcome)
	}
	return nil
}

// Assigned arms the timers of the partitions' PENDING publications. The
// worker owns the partitions until they are revoked: its sweep arms their
// PENDING publications that have no timer every SweepInterval.
func (w *Worker) Assigned(ctx context.Context, _ string, partitions []int32) error {
	w.mu.Lock()
	for _, p := range partitions {
		w.owned[p] = struct{}{}
	}
	w.startSweep()
	w.mu.Unlock()
	n, err := w.armPending(ctx, partitions)
	if err != nil {
		return err
	}
	if n > 0 {
		w.log.Info("pending publications re-armed", "partitions", partitions, "pending", n)
	}
	return nil
}

// armPending arms a timer for every PENDING publication of the partitions
// that has none, as long as the worker owns its partition, and returns how
// many it armed.
func (w *Worker) armPending(ctx context.Context, partitions []int32) (int, error) {
	if len(partitions) == 0 {
		return 0, nil
	}
	// Learn the clocks' difference before setting timers by it.
	if _, err := w.dbNow(ctx); err != nil {
		return 0, fmt.Errorf("load pending publications: %w", err)
	}
	var pending []Publication
	err := w.db.WithContext(ctx).Where("status = ? AND partition_id IN ?", PublicationPending, partitions).
		Order("scheduled_at").Find(&pending).Error
	if err != nil {
		return 0, fmt.Errorf("load pending publications: %w", err)
	}
	n := 0
	for _, p := range pending {
		if w.arm(p, true) {
			n++
		}
	}
	return n, nil
}

// Revoked disarms the timers of the partitions and waits for their
// publications in progress to stop, so that the next owner of a partition
// never works on a publication at the same time as this worker.
func (w *Worker) Revoked(_ string, partitions []int32) {
	w.mu.Lock()
	for _, p := range partitions {
		delete(w.owned, p)
	}
	var ids []int64
	for id, t := range w.armed {
		if slices.Contains(partitions, t.pub.PartitionID) {
			ids = append(ids, id)
		}
	}
	w.mu.Unlock()
	w.disarm(ids...)
}

// Pending is how many publications have an armed timer or are in progress.
func (w *Worker) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.armed)
}

// Stop disarms every timer, ends the sweep and waits for the publications
// in progress to stop; later events arm nothing. It is safe to call twice.
func (w *Worker) Stop() {
	w.mu.Lock()
	w.stopped = true
	ids := make([]int64, 0, len(w.armed))
	for id := range w.armed {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	w.cancel()
	w.disarm(ids...)
	w.sweep.Stop()
}

// arm starts the timer of pub, unless one runs for its post already, and
// reports whether it did. With owned, only while the worker owns pub's
// partition: a sweep that read the row before a revocation must not arm it
// after.
func (w *Worker) arm(pub Publication, owned bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.armed[pub.PostID] != nil {
		return false
	}
	if _, ok := w.owned[pub.PartitionID]; owned && !ok {
		return false
	}
	ctx, cancel := context.WithCancel(w.base)
	t := &timer{pub: pub, cancel: cancel, done: make(chan struct{})}
	// The worker's clock only sets the alarm, shifted to the database's
	// time as last read: PublishDue asks the database whether the post is
	// due and says how long is left if not.
	dbNow := w.cfg.Now().Add(time.Duration(w.skew.Load()))
	t.t = time.AfterFunc(max(pub.ScheduledAt.Sub(dbNow), 0), func() { w.fire(ctx, t) })
	w.armed[pub.PostID] = t
	return true
}

// disarm stops the timers of the posts and waits until none of them can act.
func (w *Worker) disarm(postIDs ...int64) {
	var wait []*timer
	w.mu.Lock()
	for _, id := range postIDs {
		t := w.armed[id]
		if t == nil {
			continue
		}
		delete(w.armed, id)
		if t.t.Stop() {
			close(t.done) // it never fired
		} else {
			wait = append(wait, t)
		}
		t.cancel()
	}
	w.mu.Unlock()
	for _, t := range wait {
		<-t.done
	}
}

// fire runs a timer's publication until it is settled or the timer is
// disarmed, one attempt at a time. The worker owns the retry schedule: a
// database error or a publisher's passing failure is tried again after a
// pause (RetryBase doubling to RetryMax, with jitter, or longer if the
// publisher asks), and a publication not yet due by the database's clock
// waits the time left. An attempt holds one of the Concurrency slots; the
// waits hold none, so posts that keep failing or hanging cannot starve the
// others.
func (w *Worker) fire(ctx context.Context, t *timer) {
	defer func() {
		w.mu.Lock()
		if w.armed[t.pub.PostID] == t {
			delete(w.armed, t.pub.PostID)
		}
		w.mu.Unlock()
		t.cancel()
		close(t.done)
	}()
	log := w.log.With("post_id", t.pub.PostID, "event_id", t.pub.EventID)
	retry := backoff.Backoff{Base: w.cfg.RetryBase, Max: w.cfg.RetryMax}
	for {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		res, err := w.attempt(ctx, t.pub.PostID)
		<-w.sem
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// Jittered, so that publications that failed together do
			// not all come back at once.
			wait = max(retry.Next(), res.retryAfter)
			log.Warn("publication failed; trying again", "err", err, "pause", wait)
		case res.status == PublicationPending: // not due by the database's clock
			wait = res.due
		case res.status == PublicationFailed:
			log.Error("publication refused for good; the post stays WORKING for an operator",
				"last_error", res.reason)
			return
		default:
			return
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// dbNow reads the database's clock and notes how far it is from the
// worker's, for the timers armed next.
func (w *Worker) dbNow(ctx context.Context) (time.Time, error) {
	now, err := database.Now(ctx, w.db)
	if err != nil {
		return now, err
	}
	w.skew.Store(int64(now.Sub(w.cfg.Now())))
	return now, nil
}

// ErrNotDue is returned by PublishDue for a publication whose scheduledAt
// the database's clock has not reached.
var ErrNotDue = errors.New("publication not due")

// result is how one attempt at a publication ended.
type result struct {
	status     PublicationStatus
	due        time.Duration // PENDING without error: due in this long, by the database's clock
	reason     string        // FAILED: the publication's last_error
	retryAfter time.Duration // after a passing failure: the least pause the publisher asked for
}

// PublishDue makes one attempt at the post's PENDING publication if it is
// due by the database's clock, and returns how the publication ended:
// PUBLISHED, CANCELLED (the post was cancelled), FAILED (the publisher
// refused it), or PENDING with an error when it should be tried again
// (wrapping ErrNotDue when it is not due yet). A publication that is not
// PENDING (a duplicate timer) is left alone and its status returned. The
// publisher is called before the post and the publication are recorded
// PUBLISHED in one transaction, so a stop in between makes the next owner
// publish again with the same key: at least once towards the publisher,
// exactly once in the database.
func (w *Worker) PublishDue(ctx context.Context, postID int64) (PublicationStatus, error) {
	res, err := w.attempt(ctx, postID)
	if err == nil && res.status == PublicationPending {
		return res.status, fmt.Errorf("%w: post %d is due in %s", ErrNotDue, postID, res.due)
	}
	return res.status, err
}

// attempt is PublishDue's body: one call to the publisher at most.
func (w *Worker) attempt(ctx context.Context, postID int64) (result, error) {
	pending := result{status: PublicationPending}
	db := w.db.WithContext(ctx)
	var pub Publication
	if err := db.Where("post_id = ?", postID).Take(&pub).Error; err != nil {
		return pending, fmt.Errorf("load publication of post %d: %w", postID, err)
	}
	if pub.Status != PublicationPending {
		return result{status: pub.Status}, nil
	}
	// The worker's clock may run ahead of the one that wrote scheduledAt:
	// the database's decides, and every time written below is its.
	now, err := w.dbNow(ctx)
	if err != nil {
		return pending, err
	}
	if wait := pub.ScheduledAt.Sub(now); wait > 0 {
		return result{status: PublicationPending, due: wait}, nil
	}
	post, err := reservation.LoadPost(db, postID)
	if err != nil {
		if errors.Is(err, reservation.ErrNotFound) {
			return w.settleNow(ctx, postID, PublicationCancelled, now, "")
		}
		return pending, err
	}
	switch post.Status {
	case reservation.StatusCancelled:
		return w.settleNow(ctx, postID, PublicationCancelled, now, "")
	case reservation.StatusPublished:
		// Published before this row was written: its first publication
		// row was deleted by the cleaner and the event delivered again.
		// Settled, but not counted as a publication a second time.
		if _, err := settle(db, postID, PublicationPublished, now, nil); err != nil {
			return pending, err
		}
		return result{status: PublicationPublished}, nil
	case reservation.StatusWorking:
	default:
		msg := fmt.Sprintf("post is %s, not %s", post.Status, reservation.StatusWorking)
		return w.settleNow(ctx, postID, PublicationFailed, now, msg)
	}

	at := now
	p := *post
	p.Status, p.PublishedAt, p.UpdatedAt = reservation.StatusPublished, &at, at
	if err := w.cfg.Publisher.Publish(ctx, Publishing{Post: p, Key: pub.EventID}); err != nil {
		msg := database.TruncateError(err.Error())
		if errors.Is(err, ErrRefused) {
			return w.settleNow(ctx, postID, PublicationFailed, now, msg)
		}
		res := pending
		if rl := (*RetryLaterError)(nil); errors.As(err, &rl) {
			res.retryAfter = rl.After
		}
		// Visible to an operator while it is tried again.
		if failedAt, nerr := database.Now(ctx, w.db); nerr == nil {
			_ = db.Model(&Publication{}).Where("post_id = ? AND status = ?", postID, PublicationPending).
				Updates(map[string]any{"attempts": gorm.Expr("attempts + 1"), "last_error": msg, "updated_at": failedAt}).Error
		}
		return res, fmt.Errorf("publish post %d: %w", postID, err)
	}

	// Published: record it even if the timer is being disarmed meanwhile,
	// or the next owner would publish it again.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	status, changed := PublicationPublished, false
	record := func(tx *gorm.DB) error {
		status, changed = PublicationPublished, false
		ok, err := reservation.MarkPublished(tx, postID, at)
		if err != nil {
			return err
		}
		if !ok {
			// Cancelled (or published) since it was read.
			cur, err := reservation.LoadPost(tx, postID)
			if err != nil {
				return err
			}
			if cur.Status != reservation.StatusPublished {
				status = PublicationCancelled
			}
			changed, err = settle(tx, postID, status, at, nil)
			return err
		}
		res := tx.Model(&Publication{}).Where("post_id = ? AND status = ?", postID, PublicationPending).
			Updates(map[string]any{"status": PublicationPublished, "published_at": at, "updated_at": at,
				"attempts": gorm.Expr("attempts + 1"), "last_error": nil})
		changed = res.RowsAffected == 1
		return res.Error
	}
	// The publisher has said yes: a failed write (a dropped connection, a
	// database restart) is tried again here, for up to rctx's 30 s, rather
	// than by the timer's next attempt, which would call the publisher again.
	// A timer disarmed meanwhile (Stop, a revoked partition) gets one last
	// try, so that a stop does not wait on a database that is down.
	retry := backoff.Backoff{Base: 50 * time.Millisecond, Max: 2 * time.Second, Exact: true}
	for {
		if err = database.Transaction(rctx, w.db, record); err == nil || rctx.Err() != nil {
			break
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			err = database.Transaction(rctx, w.db, record)
			break
		}
	}
	if err != nil {
		return pending, fmt.Errorf("record publication of post %d: %w", postID, err)
	}
	if status == PublicationPublished && changed && w.cfg.ObservePublished != nil {
		w.cfg.ObservePublished(at.Sub(pub.ScheduledAt))
	}
	if changed {
		w.observeSettled(status)
	}
	return result{status: status}, nil
}

// settleNow settles the post's PENDING publication in a statement of its
// own, with reason as its last_error if not empty.
func (w *Worker) settleNow(ctx context.Context, postID int64, status PublicationStatus, at time.Time, reason string) (result, error) {
	var lastError *string
	if reason != "" {
		lastError = &reason
	}
	changed, err := settle(w.db.WithContext(ctx), postID, status, at, lastError)
	if err != nil {
		return result{status: PublicationPending}, err
	}
	if changed {
		w.observeSettled(status)
	}
	return result{status: status, reason: reason}, nil
}

// observeSettled tells Config.ObserveSettled of a publication settled as status.
func (w *Worker) observeSettled(status PublicationStatus) {
	if w.cfg.ObserveSettled == nil {
		return
	}
	switch status {
	case PublicationPublished:
		w.cfg.ObserveSettled(OutcomePublished)
	case PublicationCancelled:
		w.cfg.ObserveSettled(OutcomeCancelled)
	case PublicationFailed:
		w.cfg.ObserveSettled(OutcomeFailed)
	}
}

// settle ends the post's publication if it is still PENDING, and reports
// whether it did.
func settle(tx *gorm.DB, postID int64, status PublicationStatus, at time.Time, lastError *string) (bool, error) {
	changes := map[string]any{"status": status, "updated_at": at}
	if lastError != nil {
		changes["last_error"] = *lastError
	}
	if status == PublicationFailed {
		changes["attempts"] = gorm.Expr("attempts + 1")
	}
	res := tx.Model(&Publication{}).Where("post_id = ? AND status = ?", postID, PublicationPending).Updates(changes)
	if res.Error != nil {
		return false, fmt.Errorf("settle publication of post %d as %s: %w", postID, status, res.Error)
	}
	return res.RowsAffected == 1, nil
}
