package outbox

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// RowError is why an operation refused one row: "id 12: status SENT, only
// FAIL rows can be requeued". What is "id"; Err is the sentinel
// (ErrNotFound, ErrNotFailed, ErrDiscarded, ErrConflict) or the database
// error.
type RowError = database.IDError

// RowResult is the outcome of Requeue or Discard for one id.
type RowResult struct {
	// ID is the row asked for.
	ID int64
	// Row is the row after the operation; on error, as read (zero when
	// the row was not found or could not be read).
	Row Entry
	// Err is nil on success, else a *RowError.
	Err error
}

// Requeue makes each FAIL row of ids PENDING again with its retries reset
// and due at now, and reports each id on its own, in the order given
// (duplicates once). A row that is not FAIL, is discarded, or changed
// between read and write (version check) is refused and left unchanged.
//
// Requeueing keeps per-aggregate order: the later events of the aggregate are still
// waiting behind the row. A discarded row is refused because its aggregate's
// later events may have been sent after it was discarded; sending it now
// would deliver it out of order.
func Requeue(ctx context.Context, db *gorm.DB, ids []int64, now time.Time) []RowResult {
	now = database.Normalize(now)
	return eachRow(ctx, db, ids, "requeued", func(e Entry) (map[string]any, Entry) {
		e.Status, e.RetryCount, e.NextAttemptAt, e.Version = StatusPending, 0, now, e.Version+1
		return map[string]any{
			"status":          StatusPending,
			"retry_count":     0,
			"next_attempt_at": now,
			"version":         gorm.Expr("version + 1"),
		}, e
	})
}

// Discard marks each FAIL row of ids as given up on by an operator: it stays
// FAIL and in the history, with discarded_at and a note in last_error, and
// no longer holds the later events of its aggregate, which the relay then sends.
// Each id is reported on its own, as by Requeue.
func Discard(ctx context.Context, db *gorm.DB, ids []int64, now time.Time) []RowResult {
	now = database.Normalize(now)
	return eachRow(ctx, db, ids, "discarded", func(e Entry) (map[string]any, Entry) {
		note := "discarded by an operator at " + now.Format(time.RFC3339)
		if e.LastError != nil && *e.LastError != "" {
			note += "; last error: " + *e.LastError
		}
		note = database.TruncateError(note)
		e.DiscardedAt, e.LastError, e.Version = &now, &note, e.Version+1
		return map[string]any{
			"discarded_at": now,
			"last_error":   note,
			"version":      gorm.Expr("version + 1"),
		}, e
	})
}

// eachRow applies update to each row of ids, once per id, in the order
// given.
func eachRow(ctx context.Context, db *gorm.DB, ids []int64, verb string,
	update func(Entry) (map[string]any, Entry)) []RowResult {
	return database.EachID(ids, func(id int64) RowResult {
		row, err := updateFailedRow(ctx, db, id, verb, update)
		return RowResult{ID: id, Row: row, Err: err}
	})
}

// updateFailedRow reads the row, checks it is FAIL and not discarded, and
// applies the update under the version it read.
func updateFailedRow(ctx context.Context, db *gorm.DB, id int64, verb string,
	update func(Entry) (map[string]any, Entry)) (Entry, error) {
	e, err := Get(ctx, db, id)
	if err != nil {
		return e, err
	}
	if e.Status != StatusFail {
		return e, &RowError{What: "id", ID: id, Err: ErrNotFailed,
			Reason: fmt.Sprintf("status %s, only FAIL rows can be %s", e.Status, verb)}
	}
	if e.DiscardedAt != nil {
		reason := "already discarded at " + e.DiscardedAt.Format(time.RFC3339)
		if verb == "requeued" {
			reason = "discarded at " + e.DiscardedAt.Format(time.RFC3339) +
				"; a discarded event is not requeued, later events of its key may have been sent after it"
		}
		return e, &RowError{What: "id", ID: id, Err: ErrDiscarded, Reason: reason}
	}
	values, after := update(e)
	res := db.WithContext(ctx).Model(&Message{}).
		Where("id = ? AND version = ? AND status = ? AND discarded_at IS NULL", id, e.Version, StatusFail).
		Updates(values)
	if res.Error != nil {
		return e, &RowError{What: "id", ID: id, Reason: "update failed: " + res.Error.Error(), Err: res.Error}
	}
	if res.RowsAffected == 0 {
		return e, &RowError{What: "id", ID: id, Err: ErrConflict,
			Reason: fmt.Sprintf("changed meanwhile (version %d is no longer current); read it again", e.Version)}
	}
	// A requeued row, or the rows a discarded one held, are due now.
	database.WakeAfterCommit(db)
	return after, nil
}

// RequeueAllFailed requeues every FAIL row that is not discarded, as Requeue
// does, batchSize rows per statement (0: DefaultRequeueBatchSize; at most
// MaxPurgeBatchSize), and returns how many it requeued. It walks the rows
// by id, so a row that fails again while it runs is not requeued twice.
// Each statement only takes rows still FAIL and not discarded, which is
// the check that matters for a row read a moment before.
func RequeueAllFailed(ctx context.Context, db *gorm.DB, now time.Time, batchSize int) (int, error) {
	if batchSize == 0 {
		batchSize = DefaultRequeueBatchSize
	}
	if batchSize < 1 || batchSize > MaxPurgeBatchSize {
		return 0, fmt.Errorf("requeue batch size %d is outside 1..%d", batchSize, MaxPurgeBatchSize)
	}
	now = database.Normalize(now)
	db = db.WithContext(ctx)
	total, after := 0, int64(0)
	for {
		var ids []int64
		err := db.Model(&Message{}).Where("status = ? AND discarded_at IS NULL AND id > ?", StatusFail, after).
			Order("id").Limit(batchSize).Pluck("id", &ids).Error
		if err != nil {
			return total, fmt.Errorf("find FAIL rows: %w", err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		res := db.Model(&Message{}).
			Where("id IN ? AND status = ? AND discarded_at IS NULL", ids, StatusFail).
			Updates(map[string]any{
				"status":          StatusPending,
				"retry_count":     0,
				"next_attempt_at": now,
				"version":         gorm.Expr("version + 1"),
			})
		if res.Error != nil {
			return total, fmt.Errorf("requeue FAIL rows: %w", res.Error)
		}
		total += int(res.RowsAffected)
		if res.RowsAffected > 0 {
			database.WakeAfterCommit(db)
		}
		if len(ids) < batchSize {
			return total, nil
		}
		after = ids[len(ids)-1]
	}
}
