package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Entry is an outbox row as the operator tools show it: the row without its
// payload, plus discarded_at. JSON names are camelCase for the admin API and
// `posting outbox list --json`.
type Entry struct {
	ID        int64  `gorm:"column:id" json:"id"`
	EventID   string `gorm:"column:event_id" json:"eventId"`
	EventType string `gorm:"column:event_type" json:"eventType"`
	// PostID is the aggregate id; "postId" is the admin API's JSON shape and stays.
	PostID        int64      `gorm:"column:aggregate_id" json:"postId"`
	Status        Status     `gorm:"column:status" json:"status"`
	RetryCount    int        `gorm:"column:retry_count" json:"retryCount"`
	Version       int64      `gorm:"column:version" json:"version"`
	Created       time.Time  `gorm:"column:created" json:"created"`
	NextAttemptAt time.Time  `gorm:"column:next_attempt_at" json:"nextAttemptAt"`
	ClaimedBy     *string    `gorm:"column:claimed_by" json:"claimedBy"`
	ClaimedAt     *time.Time `gorm:"column:claimed_at" json:"claimedAt"`
	SentAt        *time.Time `gorm:"column:sent_at" json:"sentAt"`
	DiscardedAt   *time.Time `gorm:"column:discarded_at" json:"discardedAt"`
	LastError     *string    `gorm:"column:last_error" json:"lastError"`
}

// TableName is the outbox table.
func (Entry) TableName() string { return "outbox" }

// entryColumns are the columns of Entry: never the payload, which can be large.
var entryColumns = []string{"id", "event_id", "event_type", "aggregate_id", "status", "retry_count", "version",
	"created", "next_attempt_at", "claimed_by", "claimed_at", "sent_at", "discarded_at", "last_error"}

// List returns up to limit rows of status, oldest first by (created, id),
// so that for FAIL the head of each aggregate comes before what it holds. limit
// 0 means DefaultListLimit; it must not exceed MaxListLimit.
func List(ctx context.Context, db *gorm.DB, status Status, limit int) ([]Entry, error) {
	limit, err := database.ListArgs(status, Statuses, ErrInvalidStatus, limit, DefaultListLimit, MaxListLimit)
	if err != nil {
		return nil, err
	}
	out := []Entry{}
	err = db.WithContext(ctx).Select(entryColumns).Where("status = ?", status).
		Order("created, id").Limit(limit).Find(&out).Error
	if err != nil {
		return nil, fmt.Errorf("list %s rows: %w", status, err)
	}
	for i := range out {
		utcEntry(&out[i])
	}
	return out, nil
}

// Get returns one row by id, or an error wrapping ErrNotFound.
func Get(ctx context.Context, db *gorm.DB, id int64) (Entry, error) {
	var e Entry
	err := db.WithContext(ctx).Select(entryColumns).Where("id = ?", id).Take(&e).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return e, &RowError{What: "id", ID: id, Reason: "not found", Err: ErrNotFound}
	}
	if err != nil {
		return e, fmt.Errorf("read outbox row %d: %w", id, err)
	}
	utcEntry(&e)
	return e, nil
}

func utcEntry(e *Entry) {
	utc := func(t *time.Time) {
		if t != nil {
			*t = t.UTC()
		}
	}
	e.Created, e.NextAttemptAt = e.Created.UTC(), e.NextAttemptAt.UTC()
	utc(e.ClaimedAt)
	utc(e.SentAt)
	utc(e.DiscardedAt)
}
