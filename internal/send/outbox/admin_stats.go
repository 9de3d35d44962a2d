package outbox

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

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
	// earlier event of the same aggregate is FAIL (and not discarded).
	Blocked int64 `json:"blocked"`
	// Blocking are the FAIL rows that hold later events of their aggregate, by
	// id, at most MaxBlockingListed of them. Requeue or discard them to
	// release their aggregates.
	Blocking []Blocking `json:"blocking"`
}

// Waiting describes the oldest row that waits for the relay.
type Waiting struct {
	ID int64 `json:"id"`
	// PostID is the aggregate id; "postId" is the admin API's JSON shape and stays.
	PostID  int64     `json:"postId"`
	Status  Status    `json:"status"`
	Created time.Time `json:"created"`
	// Age is now minus Created (0 if Created lies ahead of now).
	Age time.Duration `json:"-"`
	// AgeSeconds is Age for JSON readers.
	AgeSeconds float64 `json:"ageSeconds"`
}

// Blocking is a FAIL row that holds later events of its aggregate.
type Blocking struct {
	ID      int64  `json:"id"`
	EventID string `json:"eventId"`
	// PostID is the aggregate id; "postId" is the admin API's JSON shape and stays.
	PostID int64 `json:"postId"`
	// Blocked is the PENDING and RETRY rows of the aggregate after this one.
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
	// later unsent rows of their aggregate by idx_outbox_unsent_aggregate_id
	// (migration 00004), which skips the aggregate's SENT history.
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
