// Package reservation holds posts and their rules: the post entity and its
// state machine, the service whose every change writes the post and its
// outbox event in one transaction, and the scheduler job that makes due posts
// WORKING.
package reservation

import (
	"errors"
	"fmt"
	"time"

	"gorm.io/plugin/optimisticlock"
)

// Status is the state of a post.
type Status string

// The post statuses: RESERVED → WORKING → PUBLISHED, RESERVED/WORKING →
// CANCELLED, and RESERVED/WORKING → EXPIRED (not published by its
// publishBy). PUBLISHED, CANCELLED and EXPIRED are terminal.
const (
	StatusReserved  Status = "RESERVED"
	StatusWorking   Status = "WORKING"
	StatusPublished Status = "PUBLISHED"
	StatusCancelled Status = "CANCELLED"
	StatusExpired   Status = "EXPIRED"
)

// Statuses lists every status.
var Statuses = []Status{StatusReserved, StatusWorking, StatusPublished, StatusCancelled, StatusExpired}

// Terminal reports whether s is an end: PUBLISHED, CANCELLED or EXPIRED.
func (s Status) Terminal() bool {
	return s == StatusPublished || s == StatusCancelled || s == StatusExpired
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Sentinel errors of the package, wrapped with %w; check them with errors.Is.
var (
	// ErrNotFound: no post has the id.
	ErrNotFound = errors.New("post not found")
	// ErrConflict: the post changed since it was read (version mismatch).
	ErrConflict = errors.New("post was changed concurrently")
	// ErrInvalidTransition: the post's status does not allow the change.
	ErrInvalidTransition = errors.New("invalid status transition")
	// ErrInvalidInput: a field has a value the rules refuse.
	ErrInvalidInput = errors.New("invalid input")
)

// transitions lists, per status, the statuses it may move to.
var transitions = map[Status][]Status{
	StatusReserved: {StatusWorking, StatusCancelled, StatusExpired},
	StatusWorking:  {StatusPublished, StatusCancelled, StatusExpired},
}

// CanTransition reports whether a post in from may move to to.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CheckTransition returns an error wrapping ErrInvalidTransition unless from → to is allowed.
func CheckTransition(from, to Status) error {
	if !CanTransition(from, to) {
		return fmt.Errorf("%w: %s → %s", ErrInvalidTransition, from, to)
	}
	return nil
}

// Post is a reserved post, one row of the posts table.
type Post struct {
	ID          int64      `gorm:"column:id;primaryKey;autoIncrement"`
	Title       string     `gorm:"column:title"`
	Content     string     `gorm:"column:content"`
	Status      Status     `gorm:"column:status"`
	ScheduledAt time.Time  `gorm:"column:scheduled_at"`
	CreatedAt   time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt   time.Time  `gorm:"column:updated_at;autoUpdateTime:false"`
	PublishedAt *time.Time `gorm:"column:published_at"`
	// OwnerID is the JWT subject that created the post; "" when it was
	// created without authentication. It never changes.
	OwnerID string `gorm:"column:owner_id"`
	// Traceparent is the W3C trace context of the request that created the
	// post or last edited it (migration 00008), the parent of its
	// reservation event; nil: none (a post older than the column, or a
	// change made outside any trace). It is not part of the post's JSON.
	Traceparent *string `gorm:"column:traceparent" json:"-"`
	// PublishBy is the latest instant the post may still be published
	// (migration 00011): the client's publishBy, or scheduledAt plus the
	// service's late limit when the client gave none; nil: no deadline.
	// Past it a post not yet published becomes EXPIRED.
	PublishBy *time.Time `gorm:"column:publish_by"`
	// PublishClaimedAt is when the worker first called a publisher for
	// the post, set in one conditional UPDATE only while the post is
	// WORKING and before PublishBy; the expirer leaves a claimed post to
	// the worker, so a publication and an expiry never both happen. nil:
	// not claimed. Not part of the post's JSON.
	PublishClaimedAt *time.Time `gorm:"column:publish_claimed_at" json:"-"`
	// Reannounced counts the reservation events the overdue check sent
	// again for the post. Not part of the post's JSON.
	Reannounced int `gorm:"column:reannounced" json:"-"`
	// SeriesID is the series the post is an occurrence of (migration
	// 00012); nil for a post created on its own.
	SeriesID *int64 `gorm:"column:series_id"`
	// Occurrence is the occurrence's wall time in its series' zone, its
	// fields given as a UTC time; nil for a post created on its own.
	Occurrence *time.Time `gorm:"column:occurrence"`
	// SeriesException marks an occurrence post changed or cancelled on its
	// own, through the posts API: edits and the cancel of its series leave
	// it as it is.
	SeriesException bool `gorm:"column:series_exception"`
	// Version is the optimistic lock: GORM adds "AND version = ?" to every
	// update of the post and increments it.
	Version optimisticlock.Version `gorm:"column:version"`
}

// TableName is the table of the contract.
func (Post) TableName() string { return "posts" }
