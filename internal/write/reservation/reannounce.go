package reservation

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
)

// Reannounce writes a new POSTING_RESERVATION_EVENT for the WORKING post id
// through tx (the caller's transaction), occurring at now, and counts it in
// posts.reannounced, provided the post is still WORKING and has been
// announced again seen times so far. It reports whether it wrote the event:
// false when the post moved on or another instance announced it first, or
// when the outbox holds that announcement already (counted, not written).
//
// The event is an ordinary outbox row, so it is sent in the post's order
// with a sequence above every earlier event of the post; its dedup key
// (reservation:<id>:<n>) admits one n-th announcement however many
// instances repair at once. The worker keeps one publication per post, so
// an announcement the worker had already acted on changes nothing.
func Reannounce(tx *gorm.DB, id int64, seen int, now time.Time) (bool, error) {
	upd := tx.Exec("UPDATE posts SET reannounced = reannounced + 1 WHERE id = ? AND status = ? AND reannounced = ?",
		id, StatusWorking, seen)
	if upd.Error != nil {
		return false, fmt.Errorf("re-announce post %d: %w", id, upd.Error)
	}
	if upd.RowsAffected == 0 {
		return false, nil
	}
	p, err := postByID(tx, id)
	if err != nil {
		return false, fmt.Errorf("re-announce post %d: %w", id, err)
	}
	e, err := event.New(event.ReservationEvent, p.ID, now,
		event.ReservationEventFields{ScheduledAt: p.ScheduledAt, OwnerID: p.OwnerID})
	if err != nil {
		return false, fmt.Errorf("re-announce post %d: %w", id, err)
	}
	key := fmt.Sprintf("%s:%d", event.ReservationDedupKey(p.ID), seen+1)
	// The UPDATE above admits one instance per count, so a row with the key
	// is not another instance's: it outlived a reset of the count (00011
	// down and up again, a restore). That announcement was made: the count
	// goes past it, and the next check makes the next one. Failing here
	// would fail the check's round at this post, every time.
	var held int64
	if err := tx.Model(&outbox.Message{}).Where("dedup_key = ?", key).Count(&held).Error; err != nil {
		return false, fmt.Errorf("re-announce post %d: %w", id, err)
	}
	if held > 0 {
		return false, nil
	}
	ev := OutboxEvent(e, key)
	if p.Traceparent != nil {
		ev.Traceparent = *p.Traceparent // the publication continues the post's trace
	}
	if _, err := outbox.Append(tx, ev); err != nil {
		return false, fmt.Errorf("re-announce post %d: %w", id, err)
	}
	return true, nil
}
