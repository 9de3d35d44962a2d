package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

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
// PUBLISHED, CANCELLED (the post was cancelled), EXPIRED (its publishBy
// passed first), FAILED (the publisher refused it), or PENDING with an
// error when it should be tried again (wrapping ErrNotDue when it is not
// due yet). A publication that is not PENDING (a duplicate timer) is left
// alone and its status returned. The publisher is called only once the
// attempt holds its slot and has claimed the post, WORKING and before its
// publishBy by the database's clock; a post that is not settles the
// publication as its status says, and one still WORKING past its publishBy
// is expired by the worker. The publisher is called before the post and the
// publication are recorded PUBLISHED in one transaction, so a stop in
// between makes the next owner publish again with the same key: at least
// once towards the publisher, exactly once in the database.
func (w *Worker) PublishDue(ctx context.Context, postID int64) (PublicationStatus, error) {
	res, err := w.attempt(ctx, postID, false)
	if err == nil && res.status == PublicationPending {
		return res.status, fmt.Errorf("%w: post %d is due in %s", ErrNotDue, postID, res.due)
	}
	return res.status, err
}

// attempt is PublishDue's body: one call to the publisher at most. Its
// reads, its claim and its PUBLISHED writes are batched with those of the
// other attempts running at the same time (a spike of posts due together),
// so the database sees a few statements per batch instead of a few per
// post; the publication's slot is held only around the claim and the
// publisher's call. With first, its read goes ahead of every read queued.
func (w *Worker) attempt(ctx context.Context, postID int64, first bool) (result, error) {
	l, err := w.loads.queue(first, postID)[0].wait(ctx)
	if err != nil {
		return result{status: PublicationPending}, err
	}
	return w.attemptLoaded(ctx, postID, l)
}

// attemptLoaded is attempt once the publication is read: l.
func (w *Worker) attemptLoaded(ctx context.Context, postID int64, l loaded) (result, error) {
	pending := result{status: PublicationPending}
	db := w.db.WithContext(ctx)
	if l.err != nil {
		return pending, l.err
	}
	var err error
	pub, post, now := l.pub, l.post, l.now
	if pub.Status != PublicationPending {
		return result{status: pub.Status}, nil
	}
	if wait := pub.ScheduledAt.Sub(now); wait > 0 {
		return result{status: PublicationPending, due: wait}, nil
	}
	// A due attempt is a span "publish post", a child of the handling of
	// the reservation event.
	var traceparent string
	if pub.Traceparent != nil {
		traceparent = *pub.Traceparent
	}
	ctx, span := w.tracer().Start(telemetry.WithTraceparent(ctx, traceparent), "publish post",
		trace.WithAttributes(attribute.Int64("posting.post_id", postID), attribute.String("messaging.message.id", pub.EventID)))
	defer span.End()
	if post == nil {
		return w.settleNow(ctx, postID, PublicationCancelled, now, "")
	}
	switch post.Status {
	case reservation.StatusCancelled:
		return w.settleNow(ctx, postID, PublicationCancelled, now, "")
	case reservation.StatusExpired:
		return w.settleNow(ctx, postID, PublicationExpired, now, "")
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
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return pending, ctx.Err()
	}
	// The post was read before the wait for the slot, which may have
	// lasted minutes: it is claimed now, WORKING and in time by the
	// database's clock, or the publisher is not called (claimBatch).
	c, err := w.claims.do(ctx, postID)
	if err == nil {
		err = c.err
	}
	if err != nil || !c.claimed {
		<-w.sem
		if err != nil {
			return pending, err
		}
		if c.changed {
			w.observeSettled(c.status)
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("posting.publication.status", string(c.status)))
		}
		return result{status: c.status, reason: c.reason}, nil
	}
	err = w.cfg.Publisher.Publish(ctx, Publishing{Post: p, Key: pub.EventID, Attempt: pub.Attempts + 1})
	<-w.sem
	if err != nil {
		msg := database.TruncateError(err.Error())
		span.SetStatus(codes.Error, msg)
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
	// or the next owner would publish it again. The publisher has said
	// yes: a failed write (a dropped connection, a database restart) is
	// tried again here, for up to 30 s, rather than by the timer's next
	// attempt, which would call the publisher again. A timer disarmed
	// meanwhile (Stop, a revoked partition) gets one last try, so that a
	// stop does not wait on a database that is down.
	deadline := time.Now().Add(30 * time.Second)
	retry := backoff.Backoff{Base: 50 * time.Millisecond, Max: 2 * time.Second, Exact: true}
	var rec recordRes
	for {
		rec, _ = w.records.do(nil, recordReq{postID: postID, at: at})
		if rec.err == nil || time.Now().After(deadline) {
			break
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			rec, _ = w.records.do(nil, recordReq{postID: postID, at: at})
			break
		}
	}
	if rec.err != nil {
		return pending, rec.err
	}
	if rec.status == PublicationPublished && rec.changed && w.cfg.ObservePublished != nil {
		w.cfg.ObservePublished(at.Sub(pub.ScheduledAt))
	}
	if rec.changed {
		w.observeSettled(rec.status)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("posting.publication.status", string(rec.status)))
	}
	return result{status: rec.status}, nil
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
	case PublicationExpired:
		w.cfg.ObserveSettled(OutcomeExpired)
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
