package database

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/backoff"
)

// MaxPurgeBatchSize bounds the rows of one DELETE of a purge: large
// multi-row deletes from several instances deadlock and hold locks long.
const MaxPurgeBatchSize = 10000

// PurgeBatches deletes rows batch by batch: find reads up to batchSize keys
// of rows to delete (a plain read, no locks), del deletes them in a
// transaction (retried on a deadlock) re-checking the condition, and the
// next batch follows after pause, until a batch comes back short. Deleting
// by primary key in bounded batches keeps each transaction's locks few and
// short (see PITFALLS: large multi-row deletes from several processes
// deadlock). what names the rows in errors. It returns how many rows del
// deleted; when ctx ends it stops between batches with ctx's error.
func PurgeBatches[K any](ctx context.Context, db *gorm.DB, what string, batchSize int, pause time.Duration,
	find func(db *gorm.DB) ([]K, error), del func(tx *gorm.DB, keys []K) (int64, error)) (int, error) {
	if batchSize < 1 || batchSize > MaxPurgeBatchSize {
		return 0, fmt.Errorf("purge batch size %d is outside 1..%d", batchSize, MaxPurgeBatchSize)
	}
	if pause < 0 {
		return 0, fmt.Errorf("purge pause %s is negative", pause)
	}
	deleted := 0
	for {
		keys, err := find(db.WithContext(ctx))
		if err != nil {
			return deleted, fmt.Errorf("find %s to purge: %w", what, err)
		}
		if len(keys) == 0 {
			return deleted, nil
		}
		var n int64
		err = Transaction(ctx, db, func(tx *gorm.DB) error {
			var err error
			n, err = del(tx, keys)
			return err
		})
		if err != nil {
			return deleted, fmt.Errorf("purge %s: %w", what, err)
		}
		deleted += int(n)
		if len(keys) < batchSize {
			return deleted, nil
		}
		if !backoff.Sleep(ctx, pause) {
			return deleted, ctx.Err()
		}
	}
}
