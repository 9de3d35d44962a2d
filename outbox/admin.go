package outbox

// The operator tools: what the outbox holds, which rows wait for a person,
// and the ways to release them (requeue, discard) or to drop old history
// (purge). Each takes the caller's *gorm.DB, like the rest of the package;
// the CLI (posting outbox ...), the admin HTTP routes and the metrics
// collector all go through these functions.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/internal/backoff"
)

// Sentinel errors of the operator tools. Per-row errors of Requeue and
// Discard wrap one of them and say which row and why.
var (
	// ErrNotFound: no outbox row has the id.
	ErrNotFound = errors.New("outbox row not found")
	// ErrNotFailed: the row is not FAIL, and only FAIL rows can be requeued
	// or discarded (the others still belong to the relay).
	ErrNotFailed = errors.New("outbox row is not FAIL")
	// ErrDiscarded: the row was discarded by an operator already.
	ErrDiscarded = errors.New("outbox row is discarded")
	// ErrConflict: the row changed between read and write (its version
	// moved); read it again.
	ErrConflict = errors.New("outbox row changed meanwhile")
	// ErrInvalidStatus: a status name outside the contract's five.
	ErrInvalidStatus = errors.New("invalid outbox status")
)

// Limits of the operator tools.
const (
	// DefaultListLimit is the number of rows List returns when asked for 0.
	DefaultListLimit = 50
	// MaxListLimit bounds one List call.
	MaxListLimit = 1000
	// MaxBlockingListed bounds Summary.Blocking; Summary.Blocked still counts all.
	MaxBlockingListed = 100
	// MaxPurgeBatchSize bounds the rows of one DELETE of Purge: large
	// multi-row deletes from several instances deadlock and hold locks long.
	MaxPurgeBatchSize = 10000
	// DefaultRequeueBatchSize is the rows per statement of RequeueAllFailed
	// when asked for 0.
	DefaultRequeueBatchSize = 500
)

// ParseStatus returns the status named s (case-insensitive), or an error
// wrapping ErrInvalidStatus that lists the valid ones.
func ParseStatus(s string) (Status, error) {
	up := Status(strings.ToUpper(strings.TrimSpace(s)))
	for _, st := range Statuses {
		if up == st {
			return st, nil
		}
	}
	names := make([]string, len(Statuses))
	for i, st := range Statuses {
		names[i] = string(st)
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrInvalidStatus, s, strings.Join(names, ", "))
}

// Entry is an outbox row as the operator tools show it: the row without its
// payload, plus discarded_at. JSON names are camelCase for the admin API and
// `posting outbox list --json`.
type Entry struct {
	ID            int64      `gorm:"column:id" json:"id"`
	EventID       string     `gorm:"column:event_id" json:"eventId"`
	EventType     string     `gorm:"column:event_type" json:"eventType"`
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

// Summary is the state of the outbox at one moment, for an operator.
type Summary struct {
	// Counts has every status of the contract, zero included. FAIL counts
	// discarded rows too: they keep their status.
	Counts map[Status]int64 `json:"counts"`
	// Failed is the FAIL rows not discarded: the ones waiting for a person.
	Failed int64 `json:"failed"`
	// Discarded is the FAIL rows an operator gave up on.
	Discarded int64 `json:"discarded"`
	// OldestWaiting is the oldest PENDING or RETRY row by created; nil when
	// none waits.
	OldestWaiting *Waiting `json:"oldestWaiting"`
	// Blocked is the PENDING and RETRY rows that cannot be claimed because an
	// earlier event of the same post is FAIL (and not discarded).
	Blocked int64 `json:"blocked"`
	// Blocking are the FAIL rows that hold later events of their post, by
	// id, at most MaxBlockingListed of them. Requeue or discard them to
	// release their posts.
	Blocking []Blocking `json:"blocking"`
}

// Waiting describes the oldest row that waits for the relay.
type Waiting struct {
	ID      int64     `json:"id"`
	PostID  int64     `json:"postId"`
	Status  Status    `json:"status"`
	Created time.Time `json:"created"`
	// Age is now minus Created (0 if Created lies ahead of now).
	Age time.Duration `json:"-"`
	// AgeSeconds is Age for JSON readers.
	AgeSeconds float64 `json:"ageSeconds"`
}

// Blocking is a FAIL row that holds later events of its post.
type Blocking struct {
	ID      int64  `json:"id"`
	EventID string `json:"eventId"`
	PostID  int64  `json:"postId"`
	// Blocked is the PENDING and RETRY rows of the post after this one.
	Blocked int64 `json:"blocked"`
}

// Stats reads the state of the outbox. It issues a few small queries, each
// served by an index; they are not one snapshot, so under load the numbers
// may disagree by the rows that moved between them.
func Stats(ctx context.Context, db *gorm.DB, now time.Time) (Summary, error) {
	db = db.WithContext(ctx)
	st := Summary{Counts: make(map[Status]int64, len(Statuses)), Blocking: []Blocking{}}
	for _, s := range Statuses {
		st.Counts[s] = 0
	}
	var counts []struct {
		Status Status
		N      int64
	}
	if err := db.Model(&Message{}).Select("status, COUNT(*) AS n").Group("status").Scan(&counts).Error; err != nil {
		return st, fmt.Errorf("count outbox rows: %w", err)
	}
	for _, c := range counts {
		st.Counts[c.Status] = c.N
	}
	if err := db.Model(&Message{}).Where("status = ? AND discarded_at IS NOT NULL", StatusFail).
		Count(&st.Discarded).Error; err != nil {
		return st, fmt.Errorf("count discarded rows: %w", err)
	}
	st.Failed = st.Counts[StatusFail] - st.Discarded

	// One index-ordered read per status instead of a sort over both.
	for _, s := range []Status{StatusPending, StatusRetry} {
		var w []Waiting
		if err := db.Model(&Message{}).Select("id, aggregate_id AS post_id, status, created").
			Where("status = ?", s).Order("created, id").Limit(1).Scan(&w).Error; err != nil {
			return st, fmt.Errorf("find oldest %s row: %w", s, err)
		}
		if len(w) == 1 && (st.OldestWaiting == nil || w[0].Created.Before(st.OldestWaiting.Created)) {
			st.OldestWaiting = &w[0]
		}
	}
	if o := st.OldestWaiting; o != nil {
		o.Created = o.Created.UTC()
		o.Age = max(now.Sub(o.Created), 0)
		o.AgeSeconds = o.Age.Seconds()
	}

	// Both queries start from the FAIL rows, which are few, and look up the
	// later unsent rows of their post by idx_outbox_unsent_aggregate_id
	// (migration 00004), which skips the post's SENT history.
	err := db.Raw(`SELECT COUNT(*) FROM outbox w
JOIN (SELECT aggregate_id, MIN(id) AS first_id FROM outbox
      WHERE status = ? AND discarded_at IS NULL GROUP BY aggregate_id) f
  ON w.unsent_aggregate_id = f.aggregate_id AND w.id > f.first_id
WHERE w.status IN ?`, StatusFail, []Status{StatusPending, StatusRetry}).Scan(&st.Blocked).Error
	if err != nil {
		return st, fmt.Errorf("count blocked rows: %w", err)
	}
	err = db.Raw(`SELECT f.id, f.event_id, f.aggregate_id AS post_id, COUNT(w.id) AS blocked FROM outbox f
JOIN outbox w ON w.unsent_aggregate_id = f.aggregate_id AND w.id > f.id AND w.status IN ?
WHERE f.status = ? AND f.discarded_at IS NULL
GROUP BY f.id, f.event_id, f.aggregate_id
ORDER BY f.id LIMIT ?`, []Status{StatusPending, StatusRetry}, StatusFail, MaxBlockingListed).Scan(&st.Blocking).Error
	if err != nil {
		return st, fmt.Errorf("find blocking rows: %w", err)
	}
	return st, nil
}

// List returns up to limit rows of status, oldest first by (created, id),
// so that for FAIL the head of each post comes before what it holds. limit
// 0 means DefaultListLimit; it must not exceed MaxListLimit.
func List(ctx context.Context, db *gorm.DB, status Status, limit int) ([]Entry, error) {
	if !slices.Contains(Statuses, status) {
		return nil, fmt.Errorf("%w %q", ErrInvalidStatus, status)
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, fmt.Errorf("list limit %d is outside 1..%d", limit, MaxListLimit)
	}
	out := []Entry{}
	err := db.WithContext(ctx).Select(entryColumns).Where("status = ?", status).
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
		return e, &RowError{ID: id, Reason: "not found", Err: ErrNotFound}
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

// RowError is why an operation refused one row: "id 12: status SENT, only
// FAIL rows can be requeued". Err is the sentinel (ErrNotFound,
// ErrNotFailed, ErrDiscarded, ErrConflict) or the database error.
type RowError struct {
	ID     int64
	Reason string
	Err    error
}

func (e *RowError) Error() string { return fmt.Sprintf("id %d: %s", e.ID, e.Reason) }

// Unwrap returns the sentinel, for errors.Is.
func (e *RowError) Unwrap() error { return e.Err }

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
// Requeueing keeps per-post order: the later events of the post are still
// waiting behind the row. A discarded row is refused because its post's
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
// no longer holds the later events of its post, which the relay then sends.
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

// eachRow reads each row, checks it is FAIL and not discarded, and applies
// the update under the version it read.
func eachRow(ctx context.Context, db *gorm.DB, ids []int64, verb string,
	update func(Entry) (map[string]any, Entry)) []RowResult {
	seen := make(map[int64]bool, len(ids))
	out := make([]RowResult, 0, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		res := RowResult{ID: id}
		res.Row, res.Err = func() (Entry, error) {
			e, err := Get(ctx, db, id)
			if err != nil {
				return e, err
			}
			if e.Status != StatusFail {
				return e, &RowError{ID: id, Err: ErrNotFailed,
					Reason: fmt.Sprintf("status %s, only FAIL rows can be %s", e.Status, verb)}
			}
			if e.DiscardedAt != nil {
				reason := "already discarded at " + e.DiscardedAt.Format(time.RFC3339)
				if verb == "requeued" {
					reason = "discarded at " + e.DiscardedAt.Format(time.RFC3339) +
						"; a discarded event is not requeued, later events of its post may have been sent after it"
				}
				return e, &RowError{ID: id, Err: ErrDiscarded, Reason: reason}
			}
			values, after := update(e)
			res := db.WithContext(ctx).Model(&Message{}).
				Where("id = ? AND version = ? AND status = ? AND discarded_at IS NULL", id, e.Version, StatusFail).
				Updates(values)
			if res.Error != nil {
				return e, &RowError{ID: id, Reason: "update failed: " + res.Error.Error(), Err: res.Error}
			}
			if res.RowsAffected == 0 {
				return e, &RowError{ID: id, Err: ErrConflict,
					Reason: fmt.Sprintf("changed meanwhile (version %d is no longer current); read it again", e.Version)}
			}
			return after, nil
		}()
		out = append(out, res)
	}
	return out
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
		if len(ids) < batchSize {
			return total, nil
		}
		after = ids[len(ids)-1]
	}
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
