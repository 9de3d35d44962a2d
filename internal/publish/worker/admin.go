package worker

// The operator tools for publications: which ones the worker gave up on
// (FAILED: the publisher refused them, the post stays WORKING) and a retry
// that hands them back to the worker. Like the outbox's tools they take the
// caller's *gorm.DB; the CLI (posting publications ...) and the admin HTTP
// routes both go through these functions.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// Sentinel errors of the publication tools. Per-id errors of
// RetryPublications wrap one of them in a *PublicationError that says why.
var (
	// ErrPublicationNotFound: no publication has the post id.
	ErrPublicationNotFound = errors.New("publication not found")
	// ErrPublicationNotFailed: only FAILED publications can be retried; a
	// PENDING one still belongs to the worker, the others are settled.
	ErrPublicationNotFailed = errors.New("publication is not FAILED")
	// ErrPostNotWorking: the publication's post is no longer WORKING
	// (cancelled, published another way, or gone), so there is nothing to
	// publish.
	ErrPostNotWorking = errors.New("post is not WORKING")
	// ErrPublicationConflict: the publication or its post changed between
	// read and write; read it again.
	ErrPublicationConflict = errors.New("publication changed meanwhile")
	// ErrInvalidPublicationStatus: a status name outside the four.
	ErrInvalidPublicationStatus = errors.New("invalid publication status")
)

// Limits of ListPublications, the same as the outbox's list.
const (
	// DefaultPublicationListLimit is the rows ListPublications returns when
	// asked for 0.
	DefaultPublicationListLimit = database.DefaultListLimit
	// MaxPublicationListLimit bounds one ListPublications call.
	MaxPublicationListLimit = database.MaxListLimit
)

// PublicationStatuses lists every publication status.
var PublicationStatuses = []PublicationStatus{PublicationPending, PublicationPublished, PublicationCancelled, PublicationExpired, PublicationFailed}

// ParsePublicationStatus returns the status named s (case-insensitive), or
// an error wrapping ErrInvalidPublicationStatus that lists the valid ones.
func ParsePublicationStatus(s string) (PublicationStatus, error) {
	return database.ParseStatus(s, PublicationStatuses, ErrInvalidPublicationStatus)
}

// PublicationEntry is a publication as the operator tools show it, with the
// status of its post (empty when the post is gone). JSON names are camelCase
// for the admin API and `posting publications list --json`.
type PublicationEntry struct {
	PostID      int64              `gorm:"column:post_id" json:"postId"`
	EventID     string             `gorm:"column:event_id" json:"eventId"`
	PartitionID int32              `gorm:"column:partition_id" json:"partition"`
	ScheduledAt time.Time          `gorm:"column:scheduled_at" json:"scheduledAt"`
	Status      PublicationStatus  `gorm:"column:status" json:"status"`
	Attempts    int                `gorm:"column:attempts" json:"attempts"`
	LastError   *string            `gorm:"column:last_error" json:"lastError"`
	CreatedAt   time.Time          `gorm:"column:created_at" json:"createdAt"`
	UpdatedAt   time.Time          `gorm:"column:updated_at" json:"updatedAt"`
	PublishedAt *time.Time         `gorm:"column:published_at" json:"publishedAt"`
	PostStatus  reservation.Status `gorm:"column:post_status" json:"postStatus"`
}

// publicationEntrySelect reads a PublicationEntry: the publication joined
// with its post's status.
const publicationEntrySelect = `p.post_id, p.event_id, p.partition_id, p.scheduled_at, p.status, p.attempts,
p.last_error, p.created_at, p.updated_at, p.published_at, COALESCE(s.status, '') AS post_status`

func publicationEntries(db *gorm.DB) *gorm.DB {
	return db.Table("publications p").Select(publicationEntrySelect).Joins("LEFT JOIN posts s ON s.id = p.post_id")
}

func (e *PublicationEntry) utc() {
	e.ScheduledAt, e.CreatedAt, e.UpdatedAt = e.ScheduledAt.UTC(), e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	if e.PublishedAt != nil {
		t := e.PublishedAt.UTC()
		e.PublishedAt = &t
	}
}

// ListPublications returns up to limit publications of status in post id
// order, starting after afterID (0: from the first), so a caller pages with
// the last post id it got. limit 0 means DefaultPublicationListLimit; it
// must not exceed MaxPublicationListLimit.
func ListPublications(ctx context.Context, db *gorm.DB, status PublicationStatus, limit int, afterID int64) ([]PublicationEntry, error) {
	limit, err := database.ListArgs(status, PublicationStatuses, ErrInvalidPublicationStatus, limit,
		DefaultPublicationListLimit, MaxPublicationListLimit)
	if err != nil {
		return nil, err
	}
	out := []PublicationEntry{}
	err = publicationEntries(db.WithContext(ctx)).Where("p.status = ? AND p.post_id > ?", status, afterID).
		Order("p.post_id").Limit(limit).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("list %s publications: %w", status, err)
	}
	for i := range out {
		out[i].utc()
	}
	return out, nil
}

// GetPublication returns the publication of a post, or an error wrapping
// ErrPublicationNotFound.
func GetPublication(ctx context.Context, db *gorm.DB, postID int64) (PublicationEntry, error) {
	var out []PublicationEntry
	err := publicationEntries(db.WithContext(ctx)).Where("p.post_id = ?", postID).Limit(1).Scan(&out).Error
	if err != nil {
		return PublicationEntry{}, fmt.Errorf("read publication of post %d: %w", postID, err)
	}
	if len(out) == 0 {
		return PublicationEntry{}, &PublicationError{What: "post", ID: postID, Reason: "not found", Err: ErrPublicationNotFound}
	}
	out[0].utc()
	return out[0], nil
}

// PublicationError is why an operation refused one publication: "post 12:
// publication is PUBLISHED, only FAILED ones can be retried". What is
// "post" and ID the post id; Err is the sentinel or the database error.
type PublicationError = database.IDError

// PublicationResult is the outcome of RetryPublications for one post id.
type PublicationResult struct {
	// PostID is the id asked for (a publication's key is its post).
	PostID int64
	// Publication is the row after the retry; on error, as read (zero when
	// it was not found or could not be read).
	Publication PublicationEntry
	// Err is nil on success, else a *PublicationError.
	Err error
}

// RetryPublications hands each FAILED publication of ids back to the
// worker: PENDING, attempts 0, last_error NULL, updated_at the database's
// time. Each id is reported on its own, in the order given (duplicates
// once). A publication that is not FAILED, whose post is not WORKING, or
// that changed between read and write is refused and left unchanged.
//
// The table has no version column, so the write is fenced by what a change
// always moves: it takes the row only if status, attempts and updated_at are
// still as read, and only while the post is WORKING, in one statement. A
// worker that fails the post again meanwhile, or another operator's retry,
// makes it refuse rather than overwrite.
//
// The row keeps its scheduled_at, which has passed, so the worker that owns
// its partition publishes it as soon as it arms it: after a restart or a
// rebalance, or at its periodic look for PENDING rows without a timer.
func RetryPublications(ctx context.Context, db *gorm.DB, ids []int64) []PublicationResult {
	return database.EachID(ids, func(id int64) PublicationResult {
		res := PublicationResult{PostID: id}
		res.Publication, res.Err = retryPublication(ctx, db, id)
		return res
	})
}

func retryPublication(ctx context.Context, db *gorm.DB, id int64) (PublicationEntry, error) {
	e, err := GetPublication(ctx, db, id)
	if err != nil {
		return e, err
	}
	if err := retryable(e); err != nil {
		return e, err
	}
	now, err := database.Now(ctx, db)
	if err != nil {
		return e, &PublicationError{What: "post", ID: id, Reason: err.Error(), Err: err}
	}
	return retryAsRead(ctx, db, e, now)
}

// retryable says why a publication as read cannot be retried, or nil.
func retryable(e PublicationEntry) error {
	if e.Status != PublicationFailed {
		return &PublicationError{What: "post", ID: e.PostID, Err: ErrPublicationNotFailed,
			Reason: fmt.Sprintf("publication is %s, only FAILED ones can be retried", e.Status)}
	}
	if e.PostStatus != reservation.StatusWorking {
		what := "gone"
		if e.PostStatus != "" {
			what = string(e.PostStatus)
		}
		return &PublicationError{What: "post", ID: e.PostID, Err: ErrPostNotWorking,
			Reason: fmt.Sprintf("post is %s, only a WORKING post is published", what)}
	}
	return nil
}

// retryAsRead writes the retry of e, fenced by e's status, attempts and
// updated_at and by its post being WORKING.
func retryAsRead(ctx context.Context, db *gorm.DB, e PublicationEntry, now time.Time) (PublicationEntry, error) {
	res := db.WithContext(ctx).Model(&Publication{}).
		Where("post_id = ? AND status = ? AND attempts = ? AND updated_at = ?", e.PostID, PublicationFailed, e.Attempts, e.UpdatedAt).
		Where("EXISTS (SELECT 1 FROM posts WHERE posts.id = publications.post_id AND posts.status = ?)", reservation.StatusWorking).
		Updates(map[string]any{"status": PublicationPending, "attempts": 0, "last_error": nil, "updated_at": now})
	if res.Error != nil {
		return e, &PublicationError{What: "post", ID: e.PostID, Reason: "update failed: " + res.Error.Error(), Err: res.Error}
	}
	if res.RowsAffected == 0 {
		return e, &PublicationError{What: "post", ID: e.PostID, Err: ErrPublicationConflict,
			Reason: fmt.Sprintf("publication or post changed meanwhile (FAILED with %d attempts, updated %s, is no longer current); read it again",
				e.Attempts, e.UpdatedAt.Format(time.RFC3339Nano))}
	}
	e.Status, e.Attempts, e.LastError, e.UpdatedAt = PublicationPending, 0, nil, now
	return e, nil
}
