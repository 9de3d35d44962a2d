package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/publish/inbox"
)

var _ inbox.Adopter = (*Worker)(nil)

// timer is one armed publication, a member of the alarm of its scheduledAt.
type timer struct {
	pub    Publication
	alarm  *alarm
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once the timer can no longer act
}

// alarm is the one clock timer of every publication armed for the same
// scheduledAt: a spike of posts due together rings once, and the
// publications are read in a few batches queued at once, instead of
// thousands of timers each starting a goroutine that queues its own read.
type alarm struct {
	at      time.Time
	t       *time.Timer
	members map[int64]*timer // by post id; nil once rung
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

// Adopt records every PENDING publication of another partition under
// partition, so that the sweep and the next Assigned of partition arm it;
// while the worker owns partition, every sweep adopts again first.
// The RabbitMQ consumer calls it when this worker becomes its queue's one
// active consumer: publications written under Kafka partitions before a
// deployment moved to RabbitMQ would otherwise wait for partitions that no
// consumer is assigned any more.
func (w *Worker) Adopt(ctx context.Context, partition int32) (int64, error) {
	w.mu.Lock()
	w.adoptTo, w.adopting = partition, true
	w.mu.Unlock()
	return w.adopt(ctx, partition)
}

// adopt is Adopt's statement.
func (w *Worker) adopt(ctx context.Context, partition int32) (int64, error) {
	res := w.db.WithContext(ctx).Model(&Publication{}).
		Where("status = ? AND partition_id <> ?", PublicationPending, partition).
		Update("partition_id", partition)
	if res.Error != nil {
		return 0, fmt.Errorf("adopt pending publications: %w", res.Error)
	}
	return res.RowsAffected, nil
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
	t := &timer{pub: pub, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	a := w.alarms[pub.ScheduledAt.UnixNano()]
	if a == nil {
		a = &alarm{at: pub.ScheduledAt, members: map[int64]*timer{}}
		// The worker's clock only sets the alarm, shifted to the
		// database's time as last read: PublishDue asks the database
		// whether the post is due and says how long is left if not.
		dbNow := w.cfg.Now().Add(time.Duration(w.skew.Load()))
		a.t = time.AfterFunc(max(pub.ScheduledAt.Sub(dbNow), 0), func() { w.ring(a) })
		w.alarms[pub.ScheduledAt.UnixNano()] = a
	}
	t.alarm = a
	a.members[pub.PostID] = t
	w.armed[pub.PostID] = t
	return true
}

// stop takes t out of its alarm, unless the alarm rang, and reports
// whether it did. w.mu must be held.
func (w *Worker) stop(t *timer) bool {
	a := t.alarm
	if a.members == nil {
		return false
	}
	delete(a.members, t.pub.PostID)
	if len(a.members) == 0 {
		a.t.Stop()
		delete(w.alarms, a.at.UnixNano())
	}
	return true
}

// ring starts the publications of a's members: their first reads are
// queued together, and each publication runs (fire) once its read is back.
func (w *Worker) ring(a *alarm) {
	w.mu.Lock()
	if w.alarms[a.at.UnixNano()] == a {
		delete(w.alarms, a.at.UnixNano())
	}
	ts := slices.SortedFunc(maps.Values(a.members), func(x, y *timer) int { return cmp.Compare(x.pub.PostID, y.pub.PostID) })
	a.members = nil
	w.mu.Unlock()
	ids := make([]int64, len(ts))
	for i, t := range ts {
		ids[i] = t.pub.PostID
	}
	calls := w.loads.queue(false, ids...)
	// The batches run in queue order: each publication starts as soon as
	// its batch is back, not once all are. One disarmed meanwhile (a
	// revoked partition) does not wait for its read: fire ends at once.
	for i, t := range ts {
		l, err := calls[i].wait(t.ctx)
		if err != nil {
			go w.fire(t.ctx, t, nil)
			continue
		}
		go w.fire(t.ctx, t, &l)
	}
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
		if w.stop(t) {
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
//
// first is the publication's first read, made with the others of its alarm.
// A publication found not due (the worker's estimate of the database's
// clock is off by up to a round trip) reads again at the front of the queue
// once the time left has passed, not behind the reads of a whole spike.
func (w *Worker) fire(ctx context.Context, t *timer, first *loaded) {
	defer func() {
		w.mu.Lock()
		if w.armed[t.pub.PostID] == t {
			delete(w.armed, t.pub.PostID)
		}
		w.mu.Unlock()
		t.cancel()
		close(t.done)
	}()
	log := func() *slog.Logger { return w.log.With("post_id", t.pub.PostID, "event_id", t.pub.EventID) }
	retry := backoff.Backoff{Base: w.cfg.RetryBase, Max: w.cfg.RetryMax}
	l, next := first, false
	for {
		if ctx.Err() != nil {
			return
		}
		var res result
		var err error
		if l != nil {
			res, err = w.attemptLoaded(ctx, t.pub.PostID, *l)
		} else {
			res, err = w.attempt(ctx, t.pub.PostID, next)
		}
		l, next = nil, false
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// Jittered, so that publications that failed together do
			// not all come back at once.
			wait = max(retry.Next(), res.retryAfter)
			log().Warn("publication failed; trying again", "err", err, "pause", wait)
		case res.status == PublicationPending: // not due by the database's clock
			wait, next = res.due, true
		case res.status == PublicationFailed:
			log().Error("publication refused for good; the post stays WORKING for an operator",
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
