package worker

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// settledPublications are the publication statuses PurgePublications
// deletes. FAILED is kept: the post stays WORKING and an operator needs the
// row (its last_error) to retry or give up; once retried and settled it
// goes like the others. PENDING is work still to do.
var settledPublications = []PublicationStatus{PublicationPublished, PublicationCancelled, PublicationExpired}

// PurgePublications deletes PUBLISHED, CANCELLED and EXPIRED publications last
// updated (settled) before olderThan, in transactions of at most batchSize
// rows in post_id order, with pause between two. PENDING and FAILED
// publications are kept (see settledPublications). Safe with several
// cleaners at once.
func PurgePublications(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error) {
	cutoff := database.Normalize(olderThan)
	return database.PurgeBatches(ctx, db, "settled publications", batchSize, pause,
		func(db *gorm.DB) ([]int64, error) {
			var ids []int64
			err := db.Model(&Publication{}).Where("status IN ? AND updated_at < ?", settledPublications, cutoff).
				Order("post_id").Limit(batchSize).Pluck("post_id", &ids).Error
			return ids, err
		},
		func(tx *gorm.DB, ids []int64) (int64, error) {
			// The condition again: a row retried by an operator meanwhile
			// is PENDING and stays.
			res := tx.Where("post_id IN ? AND status IN ? AND updated_at < ?", ids, settledPublications, cutoff).
				Delete(&Publication{})
			return res.RowsAffected, res.Error
		})
}
