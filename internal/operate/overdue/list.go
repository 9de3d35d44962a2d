// Package overdue checks the service's end-to-end promise against the posts
// table: every post whose scheduledAt lies more than a grace in the past is
// PUBLISHED, CANCELLED or EXPIRED, or it is overdue. It lists overdue posts
// with why each is stuck as far as the tables tell, expires posts past their
// publishBy, and announces again the reservation of a post whose event was
// sent but never became a publication.
package overdue

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// Reason says why an overdue post is stuck, as far as the tables tell.
type Reason string

// The reasons, in the order of the chain a post goes through.
const (
	// ReasonNotReserved: the post is still RESERVED; no scheduler marked
	// it WORKING (no serve running its scheduler, or one failing).
	ReasonNotReserved Reason = "not_reserved"
	// ReasonEventUnsent: the reservation event waits in the outbox
	// (PENDING, PROCESSING or RETRY): the relay is behind, or the broker
	// is down.
	ReasonEventUnsent Reason = "event_unsent"
	// ReasonEventFailed: the reservation event is FAIL; an operator
	// requeues it (posting outbox requeue).
	ReasonEventFailed Reason = "event_failed"
	// ReasonNoPublication: the event was sent but no worker on this
	// database made a publication of it: no worker consumes the broker, or
	// one consumes it on another database.
	ReasonNoPublication Reason = "no_publication"
	// ReasonPublicationPending: the worker holds a PENDING publication past
	// its time: the worker is down, or its publisher keeps failing.
	ReasonPublicationPending Reason = "publication_pending"
	// ReasonPublicationFailed: the publisher refused the post for good; an
	// operator retries it (posting publications retry).
	ReasonPublicationFailed Reason = "publication_failed"
	// ReasonPublicationSettled: the publication is settled but the post
	// did not follow; an operator looks at both.
	ReasonPublicationSettled Reason = "publication_settled"
)

// Post is an overdue post and why it is stuck.
type Post struct {
	ID          int64
	OwnerID     string
	Status      reservation.Status
	ScheduledAt time.Time
	PublishBy   *time.Time
	// Overdue is how long past its scheduledAt the post is, by the
	// database's clock.
	Overdue time.Duration
	Reason  Reason
	// Detail is the last error of the event or the publication, if any.
	Detail string
	// Reannounced counts the reservation events sent again for the post.
	Reannounced int
	// EventStatus is the outbox status of the post's latest reservation
	// event; "" when it has none (a RESERVED post, or the row was purged).
	EventStatus outbox.Status
	// PublicationStatus is the status of the post's publication; "" when
	// the worker made none on this database.
	PublicationStatus string
	// PublicationAttempts counts the publisher's failed attempts.
	PublicationAttempts int
}

// Summary counts the overdue posts.
type Summary struct {
	// Count is the number of overdue posts.
	Count int
	// Oldest is how long past its scheduledAt the oldest overdue post is; 0
	// when none is.
	Oldest time.Duration
	// Now is the database's clock at the count.
	Now time.Time
}

// open are the statuses a post may be overdue in: the not yet final ones.
var open = []reservation.Status{reservation.StatusReserved, reservation.StatusWorking}

// Count returns the overdue posts' count and age: those RESERVED or WORKING
// whose scheduledAt lies more than grace before the database's clock. It is
// one query over the index (status, scheduled_at, id), whose range covers
// the overdue posts only.
func Count(ctx context.Context, db *gorm.DB, grace time.Duration) (Summary, error) {
	now, err := database.Now(ctx, db)
	if err != nil {
		return Summary{}, err
	}
	cutoff := now.Add(-grace)
	q := func() *gorm.DB {
		return db.WithContext(ctx).Model(&reservation.Post{}).Where("status IN ? AND scheduled_at < ?", open, cutoff)
	}
	var n int64
	if err := q().Count(&n).Error; err != nil {
		return Summary{}, fmt.Errorf("count overdue posts: %w", err)
	}
	s := Summary{Count: int(n), Now: now}
	if n == 0 {
		return s, nil
	}
	// The oldest by the same index, read as the column's type (an
	// aggregate's type is lost on SQLite).
	var oldest []time.Time
	if err := q().Order("scheduled_at").Limit(1).Pluck("scheduled_at", &oldest).Error; err != nil {
		return Summary{}, fmt.Errorf("find the oldest overdue post: %w", err)
	}
	if len(oldest) == 1 {
		s.Oldest = now.Sub(oldest[0].UTC())
	}
	return s, nil
}

// List returns at most limit overdue posts, the longest overdue first, each
// with why it is stuck, and the summary of all of them.
func List(ctx context.Context, db *gorm.DB, grace time.Duration, limit int) ([]Post, Summary, error) {
	sum, err := Count(ctx, db, grace)
	if err != nil {
		return nil, Summary{}, err
	}
	if sum.Count == 0 || limit <= 0 {
		return []Post{}, sum, nil
	}
	var posts []reservation.Post
	err = db.WithContext(ctx).Select("id", "owner_id", "status", "scheduled_at", "publish_by", "reannounced").
		Where("status IN ? AND scheduled_at < ?", open, sum.Now.Add(-grace)).
		Order("scheduled_at, id").Limit(limit).Find(&posts).Error
	if err != nil {
		return nil, Summary{}, fmt.Errorf("list overdue posts: %w", err)
	}
	out, err := explain(ctx, db, posts, sum.Now)
	return out, sum, err
}

// publication is what List reads of the worker's publications table.
type publication struct {
	PostID    int64   `gorm:"column:post_id"`
	Status    string  `gorm:"column:status"`
	Attempts  int     `gorm:"column:attempts"`
	LastError *string `gorm:"column:last_error"`
}

// explain reads the reservation events and publications of posts and says
// why each is stuck.
func explain(ctx context.Context, db *gorm.DB, posts []reservation.Post, now time.Time) ([]Post, error) {
	ids := make([]int64, len(posts))
	for i, p := range posts {
		ids[i] = p.ID
	}
	var events []outbox.Message
	err := db.WithContext(ctx).Select("id", "aggregate_id", "status", "last_error").
		Where("aggregate_id IN ? AND event_type = ?", ids, event.ReservationEvent).Order("id").Find(&events).Error
	if err != nil {
		return nil, fmt.Errorf("read reservation events: %w", err)
	}
	latest := make(map[int64]outbox.Message, len(events))
	for _, m := range events {
		latest[m.AggregateID] = m // id order: the last one wins
	}
	var pubs []publication
	if err := db.WithContext(ctx).Table("publications").Where("post_id IN ?", ids).Find(&pubs).Error; err != nil {
		return nil, fmt.Errorf("read publications: %w", err)
	}
	pubOf := make(map[int64]publication, len(pubs))
	for _, p := range pubs {
		pubOf[p.PostID] = p
	}
	out := make([]Post, len(posts))
	for i, p := range posts {
		o := Post{ID: p.ID, OwnerID: p.OwnerID, Status: p.Status, ScheduledAt: p.ScheduledAt.UTC(), PublishBy: p.PublishBy,
			Overdue: now.Sub(p.ScheduledAt), Reannounced: p.Reannounced}
		ev, hasEvent := latest[p.ID]
		if hasEvent {
			o.EventStatus = ev.Status
		}
		pub, hasPub := pubOf[p.ID]
		if hasPub {
			o.PublicationStatus, o.PublicationAttempts = pub.Status, pub.Attempts
		}
		switch {
		case p.Status == reservation.StatusReserved:
			o.Reason = ReasonNotReserved
		case hasPub && pub.Status == "PENDING":
			o.Reason, o.Detail = ReasonPublicationPending, deref(pub.LastError)
		case hasPub && pub.Status == "FAILED":
			o.Reason, o.Detail = ReasonPublicationFailed, deref(pub.LastError)
		case hasPub:
			o.Reason = ReasonPublicationSettled
		case hasEvent && ev.Status == outbox.StatusFail:
			o.Reason, o.Detail = ReasonEventFailed, deref(ev.LastError)
		case hasEvent && ev.Status != outbox.StatusSent:
			o.Reason, o.Detail = ReasonEventUnsent, deref(ev.LastError)
		default:
			o.Reason = ReasonNoPublication
		}
		out[i] = o
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
