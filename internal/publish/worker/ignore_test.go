package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// CREATED and UPDATED posting events ask nothing of the worker: it
// acknowledges them without writing an inbox row, a sequence or a
// publication, and counts them ignored. An UPDATED event with a huge
// sequence, which a recorded sequence would let block the post's later
// events, moves nothing either: the post's reservation is applied and
// published on time, and it is the one event in the inbox.
func TestWorkerWritesNothingForEventsThatDoNotActOnPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		c := startChain(t, db)
		post := c.createPost(t)
		c.startRelay(t)
		c.awaitConsumed(t, 1)
		c.forgePosting(t, post, event.ActionUpdated, reservation.StatusReserved, 1<<60)
		c.awaitConsumed(t, 2)
		require.Equal(t, map[string]int{worker.OutcomeIgnored: 2}, c.consumed.counts())
		require.Zero(t, countRows(t, db.DB, "inbox", "1 = 1"), "an ignored event was recorded")
		require.Zero(t, countRows(t, db.DB, "inbox_sequences", "1 = 1"), "an ignored event moved a sequence")

		at := c.reserveSoon(t, post.ID)
		c.requireOnTime(t, post.ID, at)
		rows := outboxRows(t, db.DB, post.ID)
		require.Len(t, rows, 3, "CREATED, UPDATED, the reservation")
		require.Equal(t, map[string]int{worker.OutcomeIgnored: 3, worker.OutcomeProcessed: 1}, c.consumed.counts())
		var recorded []string
		require.NoError(t, db.DB.Model(&inbox.Record{}).Pluck("event_id", &recorded).Error)
		require.Equal(t, []string{rows[2].EventID}, recorded, "the inbox holds the reservation alone")
		require.EqualValues(t, 1, countRows(t, db.DB, "inbox_sequences", "post_id = ? AND sequence = ?", post.ID, rows[2].ID))
		require.Empty(t, c.refused.counts())
	})
}

// Handle, which the consumer calls one event at a time after a batch failed,
// ignores the same events: nil, and nothing written.
func TestWorkerHandleIgnoresAnEventThatDoesNotActWithoutAStatement(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		var statements atomic.Int64
		databasetest.Before(t, db.DB, databasetest.StmtAll, func(*gorm.DB) { statements.Add(1) })
		var consumed tally
		w, err := worker.New(db.DB, worker.Config{Publisher: &recorder{}, Logger: quiet(), ObserveConsumed: consumed.consumed})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		post := &reservation.Post{ID: 42, ScheduledAt: time.Now().Add(time.Hour)}
		for _, action := range []event.Action{event.ActionCreated, event.ActionUpdated} {
			ev := decode(t, message(t, event.PostingEvent, post, event.PostingEventFields{Action: action,
				Status: string(reservation.StatusReserved), ScheduledAt: post.ScheduledAt}), 0)
			require.NoError(t, w.Handle(context.Background(), ev))
		}
		require.Zero(t, statements.Load(), "a statement for an ignored event")
		require.Equal(t, map[string]int{worker.OutcomeIgnored: 2}, consumed.counts())
		// What counts is seen: a CANCELLED event of the same post does run
		// its statements (and is refused: post 42 is not in the table).
		ev := decode(t, cancelRecord(t, post), 0)
		require.NoError(t, w.Handle(context.Background(), ev))
		require.NotZero(t, statements.Load())
		require.Equal(t, map[string]int{worker.OutcomeIgnored: 2, worker.OutcomeRefused: 1}, consumed.counts())
		require.Zero(t, countRows(t, db.DB, "inbox", "1 = 1"))
	})
}
