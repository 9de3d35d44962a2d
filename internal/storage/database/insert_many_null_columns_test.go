package database_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// nullablePost is a post as the service creates it, with every nullable
// column unset, or with each set.
func nullablePost(now time.Time, set bool) *reservation.Post {
	p := &reservation.Post{Title: "t", Content: "c", Status: reservation.StatusReserved, ScheduledAt: now.Add(time.Hour),
		CreatedAt: now, UpdatedAt: now, OwnerID: "o", Version: optimisticlock.Version{Int64: 1, Valid: true}}
	if set {
		tp, at, series := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", now.Add(2*time.Hour), int64(7)
		p.PublishedAt, p.Traceparent, p.PublishBy, p.PublishClaimedAt, p.SeriesID, p.Occurrence = &at, &tp, &at, &at, &series, &at
	}
	return p
}

// nullableMessage is an outbox row, with every nullable column unset or
// with each set; i makes its event id and dedup key its own.
func nullableMessage(now time.Time, i int, set bool) outbox.Message {
	m := outbox.Message{EventID: fmt.Sprintf("0190b000-0000-7000-8000-%012d", i), EventType: "POSTING_EVENT", AggregateID: 1,
		Payload: `{}`, Created: now, Status: outbox.StatusPending, Version: 1, NextAttemptAt: now}
	if set {
		by, key, tp, lastErr := "relay", fmt.Sprint("key ", i), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "refused"
		m.ClaimedBy, m.ClaimedAt, m.SentAt, m.LastError, m.DedupKey, m.Traceparent = &by, &now, &now, &lastErr, &key, &tp
	}
	return m
}

// requireStored reads each of posts and msgs back by its id and requires
// it equal to the row written.
func requireStored(t *testing.T, db *database.DB, posts []*reservation.Post, msgs []outbox.Message) {
	t.Helper()
	for _, want := range posts {
		var got reservation.Post
		require.NoError(t, db.First(&got, want.ID).Error)
		require.Equal(t, *want, got)
	}
	for _, want := range msgs {
		var got outbox.Message
		require.NoError(t, db.First(&got, want.ID).Error)
		require.Equal(t, want, got)
	}
}

// InsertMany leaves out of a statement each nullable column that is NULL in
// all its rows: on the posts and outbox tables, as the service writes them,
// such rows read back with every nullable column NULL, and rows with every
// one set read back with the values given.
func TestInsertManyLeavesNullColumnsNull(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		bare, full := []*reservation.Post{nullablePost(now, false), nullablePost(now, false)}, []*reservation.Post{nullablePost(now, true), nullablePost(now, true)}
		bareMsgs, fullMsgs := []outbox.Message{nullableMessage(now, 1, false), nullableMessage(now, 2, false)}, []outbox.Message{nullableMessage(now, 3, true), nullableMessage(now, 4, true)}
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			return errors.Join(database.InsertMany(tx, bare), database.InsertMany(tx, full),
				database.InsertMany(tx, bareMsgs), database.InsertMany(tx, fullMsgs))
		}))
		requireStored(t, db, append(bare, full...), append(bareMsgs, fullMsgs...))
	})
}

// The columns InsertMany leaves out of one statement are not left out of the
// transaction's later statements: a single-row Create after it, through the
// same tx (as writeGroup's other writes follow its InsertMany), writes them.
func TestInsertManyOmissionDoesNotLeakIntoLaterCreates(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		full := nullablePost(now, true)
		fullMsg := nullableMessage(now, 2, true)
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			if err := database.InsertMany(tx, []*reservation.Post{nullablePost(now, false)}); err != nil {
				return err
			}
			if err := tx.Create(full).Error; err != nil {
				return err
			}
			if err := database.InsertMany(tx, []outbox.Message{nullableMessage(now, 1, false)}); err != nil {
				return err
			}
			return tx.Create(&fullMsg).Error
		}))
		requireStored(t, db, []*reservation.Post{full}, []outbox.Message{fullMsg})
	})
}

// InsertMany splits rows into statements (50 rows on SQLite, 1,000
// elsewhere): a column NULL in all rows of one statement but set in a row of
// another is written where set, whichever statement comes first.
func TestInsertManyWritesAColumnSetInAnotherStatementOnly(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		n := 1001
		if db.Dialect == database.SQLite {
			n = 51
		}
		posts := make([]*reservation.Post, 2*n)
		msgs := make([]outbox.Message, 2*n)
		for i := range posts {
			set := i == n-1 || i == n // last of the first statement group, first after it
			set = set || i == 2*n-1
			posts[i] = nullablePost(now, set)
			msgs[i] = nullableMessage(now, i, set)
		}
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			if err := database.InsertMany(tx, posts); err != nil {
				return err
			}
			return database.InsertMany(tx, msgs)
		}))
		var stored []reservation.Post
		require.NoError(t, db.Order("id").Find(&stored).Error)
		require.Len(t, stored, len(posts))
		for i := range posts {
			require.Equal(t, *posts[i], stored[i], "post %d", i)
		}
		var storedMsgs []outbox.Message
		require.NoError(t, db.Where("event_id LIKE ?", "0190b000-%").Order("id").Find(&storedMsgs).Error)
		require.Len(t, storedMsgs, len(msgs))
		for i := range msgs {
			require.Equal(t, msgs[i], storedMsgs[i], "message %d", i)
		}
	})
}

// A pointer to a zero value is not nil: InsertMany writes it, and it reads
// back as the zero value, not as NULL.
func TestInsertManyWritesPointersToZeroValues(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		empty, zero := "", int64(0)
		p := nullablePost(now, false)
		p.Traceparent, p.SeriesID = &empty, &zero
		m := nullableMessage(now, 9, false)
		m.LastError, m.ClaimedBy = &empty, &empty
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			if err := database.InsertMany(tx, []*reservation.Post{p}); err != nil {
				return err
			}
			msgs := []outbox.Message{m}
			err := database.InsertMany(tx, msgs)
			m = msgs[0]
			return err
		}))
		requireStored(t, db, []*reservation.Post{p}, []outbox.Message{m})
	})
}

// InsertMany on a chained handle (tx.Set, tx.Clauses, tx.Table: a *gorm.DB
// that shares its statement with the caller's, unlike a transaction's or a
// Session's) must not leave its omitted columns on the caller's handle: a
// later Create through that handle writes every column it sets. With the
// omission on the shared statement, the post below was written with its
// traceparent, publishBy, series and times all NULL.
func TestInsertManyOnAChainedHandleLeavesItsLaterCreatesWhole(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		full := nullablePost(now, true)
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			chained := tx.Set("insert_many:setting", 1)
			if err := database.InsertMany(chained, []*reservation.Post{nullablePost(now, false)}); err != nil {
				return err
			}
			return chained.Create(full).Error
		}))
		requireStored(t, db, []*reservation.Post{full}, nil)
	})
}
