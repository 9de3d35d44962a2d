package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// MaxBatch bounds the events a consumer hands to BatchHandler.HandleBatch
// at once, and so the events one transaction of ProcessBatch records: the
// IN lists and multi-row inserts stay far below every database's placeholder
// limit, and the transaction short enough not to hold SQLite's one write lock
// for long.
const MaxBatch = 500

// BatchHandler is a Handler that can also process the events a consumer
// fetched together, in one transaction. A consumer hands it up to MaxBatch
// events of one partition (or queue), in their order, and commits their
// offsets (acknowledges them) only after HandleBatch returned nil.
type BatchHandler interface {
	Handler
	// HandleBatch processes evs in order as one unit. It returns nil once
	// the effects of every event are durable; malformed[i], when not nil,
	// says that evs[i] is malformed (it wraps ErrMalformed) and was skipped.
	// On an error nothing of the batch is durable: the consumer then
	// handles the events one at a time with Handle, so that a poison
	// message is isolated and retried (or skipped) on its own.
	HandleBatch(ctx context.Context, evs []Event) (malformed []error, err error)
}

// ProcessBatch is Process for several events in one transaction of db: it
// records every event of evs that consumer had not processed before, and
// runs fn once with the indexes (ascending) of the events to apply. The
// outcomes say, per event, what happened, as Process's do: Duplicate for an
// event in the inbox already (or earlier in evs), OutOfOrder for an event
// whose sequence is not above the last one applied for its post, counting
// the events before it in evs (so two events of one post in one batch are
// judged in their order). fn must be safe to re-run. On an error nothing is
// recorded.
//
// The inbox rows are written in one statement: a delivery of the same event
// racing this one fails it on the primary key (the consumer then tries
// again and sees a duplicate). The sequences of the batch's posts are locked
// when they are read (on MySQL and PostgreSQL), so a concurrent consumer
// cannot move them between the read and the write; on MySQL and MariaDB the
// transaction runs at READ COMMITTED (see advanceSequences).
func ProcessBatch(ctx context.Context, db *gorm.DB, consumer string, evs []Event, at time.Time, fn func(tx *gorm.DB, apply []int) error) (outcomes []Outcome, err error) {
	if len(evs) > MaxBatch {
		return nil, fmt.Errorf("process a batch of %d events: more than %d", len(evs), MaxBatch)
	}
	at = database.Normalize(at)
	var opts []*sql.TxOptions
	if rc := database.DriverOf(db).ReadCommitted(); rc != nil {
		// See advanceSequences: READ COMMITTED takes no gap locks, and
		// reads the sequences as last committed.
		opts = append(opts, rc)
	}
	err = database.Transaction(ctx, db, func(tx *gorm.DB) error {
		outcomes = make([]Outcome, len(evs)) // a re-run starts afresh
		ids := make([]string, len(evs))
		for i, ev := range evs {
			ids[i] = ev.EventID
		}
		_, done, err := database.PluckSet[string](tx.Model(&Record{}).Where("consumer = ? AND event_id IN ?", consumer, ids), "event_id")
		if err != nil {
			return fmt.Errorf("read %d events in the inbox: %w", len(ids), err)
		}
		var recs []Record
		for i, ev := range evs {
			if done[ev.EventID] {
				outcomes[i] = Duplicate
				continue
			}
			done[ev.EventID] = true
			recs = append(recs, Record{Consumer: consumer, EventID: ev.EventID, EventType: string(ev.Type), ProcessedAt: at})
		}
		if len(recs) == 0 {
			return nil
		}
		if err := tx.Create(&recs).Error; err != nil {
			return fmt.Errorf("record %d events in the inbox: %w", len(recs), err)
		}
		if err := advanceSequences(tx, consumer, evs, outcomes); err != nil {
			return err
		}
		var apply []int
		for i, o := range outcomes {
			if o == Applied {
				apply = append(apply, i)
			}
		}
		if len(apply) == 0 {
			return nil
		}
		return fn(tx, apply)
	}, opts...)
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// advanceSequences judges the events of evs still Applied in outcomes by
// their sequences, in order, marks the older ones OutOfOrder and writes the
// posts' new last sequences in tx: one insert of a row (at sequence 0) for
// each post seen for the first time, one read and one update.
//
// The rows are inserted before they are read, in ascending post order, and
// the insert locks them: it writes the new rows, and on MySQL and MariaDB
// locks the rows present (ON DUPLICATE KEY UPDATE); where the insert does
// not (database.Driver's InsertIgnoreLocks: PostgreSQL) the read locks them
// (FOR UPDATE); SQLite has one writer at a time. A concurrent
// insert of the same post waits for the other transaction, then keeps its
// row. On MySQL and MariaDB, ProcessBatch runs at READ COMMITTED, so the
// read, which takes no lock there, sees the last committed sequences, and no
// statement takes a gap lock: at REPEATABLE READ, a locking read of absent
// posts (or a range scan past the batch's posts) locks the gaps between
// them, a gap lock does not exclude another transaction's on the same gap,
// and two batches of different new posts each then wait, inserting, for the
// other's gap lock: a deadlock.
func advanceSequences(tx *gorm.DB, consumer string, evs []Event, outcomes []Outcome) error {
	var posts []int64
	inBatch := map[int64]bool{}
	for i, ev := range evs {
		if outcomes[i] == Applied && ev.Sequence > 0 && !inBatch[ev.PostID] {
			inBatch[ev.PostID] = true
			posts = append(posts, ev.PostID)
		}
	}
	if len(posts) == 0 {
		return nil
	}
	slices.Sort(posts)
	seeds := make([]sequenceRecord, len(posts))
	for i, id := range posts {
		seeds[i] = sequenceRecord{Consumer: consumer, PostID: id}
	}
	// Every inserted row is updated below: each post has an event with a
	// sequence above 0, so no row is left at 0 once committed.
	drv := database.DriverOf(tx)
	if err := drv.InsertIgnore(tx).Create(&seeds).Error; err != nil {
		return fmt.Errorf("record the sequences of %d posts: %w", len(posts), err)
	}
	q := tx.Where("consumer = ? AND post_id IN ?", consumer, posts)
	if !drv.InsertIgnoreLocks() {
		q = drv.ForUpdate(q)
	}
	var rows []sequenceRecord
	if err := q.Find(&rows).Error; err != nil {
		return fmt.Errorf("read the sequences of %d posts: %w", len(posts), err)
	}
	last := make(map[int64]int64, len(posts))
	for _, r := range rows {
		last[r.PostID] = r.Sequence
	}
	moved := map[int64]bool{}
	for i, ev := range evs {
		if outcomes[i] != Applied || ev.Sequence == 0 {
			continue
		}
		if ev.Sequence <= last[ev.PostID] {
			outcomes[i] = OutOfOrder
			continue
		}
		last[ev.PostID], moved[ev.PostID] = ev.Sequence, true
	}
	// An explicit integer type: PostgreSQL would take untyped CASE results
	// for text.
	intType := drv.BigIntType()
	var set strings.Builder
	var args []any
	var updated []int64
	for _, id := range posts {
		if moved[id] {
			set.WriteString(" WHEN ? THEN CAST(? AS " + intType + ")")
			args = append(args, id, last[id])
			updated = append(updated, id)
		}
	}
	if len(updated) > 0 {
		args = append(args, consumer, updated)
		if err := tx.Exec("UPDATE inbox_sequences SET sequence = CASE post_id"+set.String()+" END WHERE consumer = ? AND post_id IN ?", args...).Error; err != nil {
			return fmt.Errorf("advance the sequences of %d posts: %w", len(updated), err)
		}
	}
	return nil
}
