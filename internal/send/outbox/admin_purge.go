package outbox

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/storage/database"
)

// MaxPurgeRemainingCounted bounds the count of PurgeResult.Remaining: it
// reads at most this many index entries, so a call over a large backlog
// answers at once (an exact COUNT of 500k rows costs 100 ms of database
// time). A Remaining of MaxPurgeRemainingCounted means that many or more.
const MaxPurgeRemainingCounted = 100000

// PurgeResult is what PurgeWithin did and what it left.
type PurgeResult struct {
	// Deleted is the SENT rows this call deleted.
	Deleted int
	// Remaining is the SENT rows still sent before the cutoff when the call
	// stopped, counted up to MaxPurgeRemainingCounted.
	Remaining int
	// Complete is true when none remain: another call has nothing to do.
	Complete bool
}

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
	n, _, err := purge(ctx, db, database.Normalize(olderThan), batchSize, pause, time.Time{})
	return n, err
}

// PurgeWithin deletes as Purge does, but starts no statement and no pause
// once budget has passed since the call: a caller that must answer in time
// (an HTTP request) learns what it deleted and what remains, and calls
// again. It runs at least one statement, so repeated calls always progress.
// A statement in flight when the budget ends is finished, not cut: the
// budget should leave room for one.
func PurgeWithin(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause, budget time.Duration) (PurgeResult, error) {
	if budget <= 0 {
		return PurgeResult{}, fmt.Errorf("purge budget %s is not positive", budget)
	}
	cutoff := database.Normalize(olderThan)
	n, done, err := purge(ctx, db, cutoff, batchSize, pause, time.Now().Add(budget))
	res := PurgeResult{Deleted: n, Complete: done}
	if err != nil || done {
		return res, err
	}
	// The last batch was full: count what is left, boundedly. Zero here is
	// complete too (the last batch took exactly the last rows).
	var left int64
	sub := purgeable(db.WithContext(ctx), cutoff).Select("1").Limit(MaxPurgeRemainingCounted)
	if err := db.WithContext(ctx).Table("(?) AS purgeable", sub).Count(&left).Error; err != nil {
		return res, fmt.Errorf("count SENT rows left to purge: %w", err)
	}
	res.Remaining, res.Complete = int(left), left == 0
	return res, nil
}

// purgeable selects the SENT rows sent before cutoff, by the (status,
// created, id) index: a row is created before it is sent.
func purgeable(db *gorm.DB, cutoff time.Time) *gorm.DB {
	return db.Model(&Message{}).Where("status = ? AND created < ? AND sent_at < ?", StatusSent, cutoff, cutoff)
}

// purge deletes batch after batch until one comes back short (done), ctx
// ends, or, with a non-zero deadline, the deadline passes between batches.
func purge(ctx context.Context, db *gorm.DB, cutoff time.Time, batchSize int, pause time.Duration, deadline time.Time) (deleted int, done bool, err error) {
	if batchSize < 1 || batchSize > MaxPurgeBatchSize {
		return 0, false, fmt.Errorf("purge batch size %d is outside 1..%d", batchSize, MaxPurgeBatchSize)
	}
	if pause < 0 {
		return 0, false, fmt.Errorf("purge pause %s is negative", pause)
	}
	for {
		var ids []int64
		err := purgeable(db.WithContext(ctx), cutoff).Order("created, id").Limit(batchSize).Pluck("id", &ids).Error
		if err != nil {
			return deleted, false, fmt.Errorf("find SENT rows to purge: %w", err)
		}
		if len(ids) == 0 {
			return deleted, true, nil
		}
		var n int64
		err = database.Transaction(ctx, db, func(tx *gorm.DB) error {
			res := tx.Where("id IN ? AND status = ? AND sent_at < ?", ids, StatusSent, cutoff).Delete(&Message{})
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return deleted, false, fmt.Errorf("purge SENT rows: %w", err)
		}
		deleted += int(n)
		if len(ids) < batchSize {
			return deleted, true, nil
		}
		// A pause that would end past the deadline is not taken: the
		// answer is due then.
		if !deadline.IsZero() && !time.Now().Add(pause).Before(deadline) {
			return deleted, false, nil
		}
		if !backoff.Sleep(ctx, pause) {
			return deleted, false, ctx.Err()
		}
	}
}
