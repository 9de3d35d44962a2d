package outbox

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// AppendMany writes evs as PENDING rows through tx, the caller's
// transaction, in multi-row INSERTs (database.InsertMany: 1,000 events a
// statement, 50 on SQLite) instead of one statement per event, and returns
// the written rows in the order of evs, with their ids. Their ids follow the
// order of evs, so the relay sends them in that order. Every event is
// checked first (ErrInvalidEvent), and nothing is written if one is bad. If
// any event's dedup key is already recorded the append fails as a whole with
// ErrDuplicate, naming no key, though the statements before the one refused
// have written their rows through tx: the caller's transaction is then to be
// rolled back, and the events appended one by one (Append) to learn which.
// Like Append, it wakes tx's commit waker (database.WithCommitWaker) once
// after the commit.
//
// Each row stores its event's Traceparent, so one statement can write events
// of many traces (the scheduler's reservations, each in the trace of the
// request that made its post); an event without one gets no traceparent, and
// AppendMany starts no span.
func AppendMany(tx *gorm.DB, evs []Event) ([]Message, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	msgs := make([]Message, len(evs))
	dedup := false
	for i, ev := range evs {
		m, err := NewMessage(ev)
		if err != nil {
			return nil, err
		}
		msgs[i] = *m
		dedup = dedup || ev.DedupKey != ""
	}
	if err := database.InsertMany(tx, msgs); err != nil {
		if dedup && errors.Is(err, gorm.ErrDuplicatedKey) {
			return nil, fmt.Errorf("%w: one of %d dedup keys", ErrDuplicate, len(evs))
		}
		return nil, fmt.Errorf("append %d outbox events: %w", len(evs), err)
	}
	// The local relay, if tx carries one's waker, polls once tx commits.
	database.WakeAfterCommit(tx)
	return msgs, nil
}
