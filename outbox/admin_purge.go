package outbox

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/internal/backoff"
)

// Purge deletes SENT rows sent before olderThan, never a row of another
// status, batchSize rows per statement (1..MaxPurgeBatchSize) with pause
// between statements, and returns how many it deleted. When ctx ends it
// stops between statements and returns what it deleted with ctx's error.
//
// Each batch reads the ids first (oldest first, by the (status, created, id)
// index; created < olderThan holds for every such row, since a row is
// created before it is sent, and keeps the read a bounded index range) and
// deletes by primary key in its own short transaction, retried when it
// loses a deadlock. Several instances may purge at once: a row two of them
// picked is deleted by one, and the other's statement skips it.
func Purge(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error) {
	if batchSize < 1 || batchSize > MaxPurgeBatchSize {
		return 0, fmt.Errorf("purge batch size %d is outside 1..%d", batchSize, MaxPurgeBatchSize)
	}
	if pause < 0 {
		return 0, fmt.Errorf("purge pause %s is negative", pause)
	}
	cutoff := database.Normalize(olderThan)
	deleted := 0
	for {
		var ids []int64
		err := db.WithContext(ctx).Model(&Message{}).
			Where("status = ? AND created < ? AND sent_at < ?", StatusSent, cutoff, cutoff).
			Order("created, id").Limit(batchSize).Pluck("id", &ids).Error
		if err != nil {
			return deleted, fmt.Errorf("find SENT rows to purge: %w", err)
		}
		if len(ids) == 0 {
			return deleted, nil
		}
		var n int64
		err = database.Transaction(ctx, db, func(tx *gorm.DB) error {
			res := tx.Where("id IN ? AND status = ? AND sent_at < ?", ids, StatusSent, cutoff).Delete(&Message{})
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return deleted, fmt.Errorf("purge SENT rows: %w", err)
		}
		deleted += int(n)
		if len(ids) < batchSize {
			return deleted, nil
		}
		if !backoff.Sleep(ctx, pause) {
			return deleted, ctx.Err()
		}
	}
}
