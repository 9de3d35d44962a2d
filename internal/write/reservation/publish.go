package reservation

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// LoadPost reads the post with id through db (a DB or the caller's
// transaction), or returns an error wrapping ErrNotFound.
func LoadPost(db *gorm.DB, id int64) (*Post, error) { return postByID(db, id) }

// MarkPublished moves the posts ids WORKING → PUBLISHED with publishedAt =
// at, in one statement through tx, the caller's transaction (the worker's,
// which records the publications in the same one). It returns the status of
// each post afterwards; published[id] is true for the posts now PUBLISHED at
// at (marked here, or by an earlier attempt at the same instant). A post no
// longer WORKING (cancelled, or published by someone else) is left as it is.
// PUBLISHED emits no event: the contract's POSTING_EVENT actions are
// CREATED, UPDATED and CANCELLED.
func MarkPublished(tx *gorm.DB, ids []int64, at time.Time) (published map[int64]bool, status map[int64]Status, err error) {
	published = make(map[int64]bool, len(ids))
	status = make(map[int64]Status, len(ids))
	res := tx.Exec("UPDATE posts SET status = ?, published_at = ?, updated_at = ?, version = version + 1 WHERE status = ? AND id IN ?",
		StatusPublished, at, at, StatusWorking, ids)
	if res.Error != nil {
		return nil, nil, fmt.Errorf("mark %d posts published: %w", len(ids), res.Error)
	}
	if int(res.RowsAffected) == len(ids) {
		for _, id := range ids {
			published[id], status[id] = true, StatusPublished
		}
		return published, status, nil
	}
	// Some were cancelled (or published) since they were read.
	var rows []Post
	if err := tx.Select("id", "status", "published_at").Where("id IN ?", ids).Find(&rows).Error; err != nil {
		return nil, nil, fmt.Errorf("read %d posts: %w", len(ids), err)
	}
	for _, p := range rows {
		status[p.ID] = p.Status
		if p.Status == StatusPublished && p.PublishedAt != nil && p.PublishedAt.Equal(at) {
			published[p.ID] = true
		}
	}
	return published, status, nil
}
