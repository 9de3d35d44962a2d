package reservation

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
)

// Expire moves the posts ids that are still RESERVED or WORKING and whose
// publish_by lies before now to EXPIRED, through tx (the caller's
// transaction), and appends a POSTING_EVENT EXPIRED for each post it moved,
// in the same transaction. With claimed false it leaves a post the worker
// has claimed for publishing (publish_claimed_at set) alone: that post's end
// is the worker's to decide, so a publication and an expiry never both
// happen. The worker and the overdue check both pass false: the worker
// expires only posts it has not claimed, and a claimed post it publishes
// or settles itself. It returns the posts it expired, in the order of ids.
func Expire(tx *gorm.DB, ids []int64, now time.Time, claimed bool) ([]Post, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q := tx.Where("id IN ? AND status IN ? AND publish_by < ?", ids, []Status{StatusReserved, StatusWorking}, now)
	if !claimed {
		q = q.Where("publish_claimed_at IS NULL")
	}
	var due []Post
	if err := q.Select("id", "status", "scheduled_at", "owner_id", "series_id", "occurrence", "version").Order("id").Find(&due).Error; err != nil {
		return nil, fmt.Errorf("read %d posts to expire: %w", len(ids), err)
	}
	var expired []Post
	for _, p := range due {
		// One conditional UPDATE per post: the version read must still be
		// the post's, so a change that slipped in (a cancel, the
		// scheduler, the worker's claim) leaves the post to it.
		// The worker's claim changes neither status nor version, so a
		// claim that committed after the read above is checked here
		// again: an expiry never lands on a claimed post.
		q := "UPDATE posts SET status = ?, updated_at = ?, version = version + 1 WHERE id = ? AND version = ? AND status = ?"
		if !claimed {
			q += " AND publish_claimed_at IS NULL"
		}
		upd := tx.Exec(q, StatusExpired, now, p.ID, p.Version.Int64, p.Status)
		if upd.Error != nil {
			return nil, fmt.Errorf("expire post %d: %w", p.ID, upd.Error)
		}
		if upd.RowsAffected == 0 {
			continue
		}
		p.Status, p.UpdatedAt = StatusExpired, now
		p.Version.Int64++
		if err := appendChangeEvent(tx, &p, event.ActionExpired, now); err != nil {
			return nil, fmt.Errorf("expire post %d: %w", p.ID, err)
		}
		expired = append(expired, p)
	}
	return expired, nil
}
