package reservation

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
)

// LoadPost reads the post with id through db (a DB or the caller's
// transaction), or returns an error wrapping ErrNotFound.
func LoadPost(db *gorm.DB, id int64) (*Post, error) { return postByID(db, id) }

// MarkPublished moves the post WORKING → PUBLISHED with publishedAt = at,
// through tx, the caller's transaction (the worker's, which records its
// publication in the same one). It reports false, changing nothing, when
// the post is not WORKING any more: cancelled, or published by someone else.
// PUBLISHED emits no event: the contract's POSTING_EVENT actions are
// CREATED, UPDATED and CANCELLED.
func MarkPublished(tx *gorm.DB, id int64, at time.Time) (bool, error) {
	at = database.Normalize(at)
	res := tx.Exec("UPDATE posts SET status = ?, published_at = ?, updated_at = ?, version = version + 1 WHERE id = ? AND status = ?",
		StatusPublished, at, at, id, StatusWorking)
	if res.Error != nil {
		return false, fmt.Errorf("mark post %d published: %w", id, res.Error)
	}
	return res.RowsAffected == 1, nil
}
