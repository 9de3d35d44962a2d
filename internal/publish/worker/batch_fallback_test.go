package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/inbox/consume"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// settled is a consume.Settler that only notes what it was told.
type settled struct{ acked, skipped []int }

func (s *settled) Ack(i int) error  { s.acked = append(s.acked, i); return nil }
func (s *settled) Skip(i int) error { s.skipped = append(s.skipped, i); return nil }

// A batch whose transaction fails is handled again one event at a time by
// the consume loop (Handle). Each event is counted once, by the delivery
// that settled it: the ignored CREATED event and the refused CANCELLED one
// are not counted by the failed batch as well, and the refusal reason once.
func TestWorkerCountsEachEventOnceWhenItsBatchFallsBackToOneAtATime(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		var consumed, refused tally
		w, err := worker.New(db.DB, worker.Config{Publisher: &recorder{}, Logger: quiet(),
			ObserveConsumed: consumed.consumed, ObserveRefused: refused.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		kept := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		unknown := &reservation.Post{ID: kept.ID + 1000, ScheduledAt: kept.ScheduledAt}
		recs := []kafkatest.Record{
			message(t, event.PostingEvent, kept, event.PostingEventFields{Action: event.ActionCreated,
				Status: string(reservation.StatusReserved), ScheduledAt: kept.ScheduledAt}),
			cancelRecord(t, unknown), // refused: its post is not in the table
			reservationRecord(t, kept),
		}
		msgs := make([]consume.Message, len(recs))
		for i, r := range recs {
			msgs[i] = consume.Message{Key: []byte(r.Key), Headers: r.Headers, Value: r.Value, Topic: "posting-events", Offset: int64(i)}
		}
		// The batch's transaction fails once (its read of the inbox); the
		// one-at-a-time handling that follows goes through.
		databasetest.Fail(t, db.DB, databasetest.StmtAll, errBatch, databasetest.Once(databasetest.Table("inbox")))
		loop := consume.New(consume.Config{Handler: w, RetryBase: time.Millisecond, RetryMax: time.Millisecond,
			Observe: consumed.consumed})
		var s settled
		ok, err := loop.Handle(context.Background(), msgs, &s)
		require.NoError(t, err)
		require.True(t, ok)
		require.Empty(t, s.skipped)
		require.Equal(t, []int{0, 1, 2}, s.acked, "handled one at a time")

		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, kept.ID).Status)
		require.EqualValues(t, 1, databasetest.Count[inbox.Record](t, db.DB))
		require.Equal(t, map[string]int{worker.OutcomeIgnored: 1, worker.OutcomeRefused: 1, worker.OutcomeProcessed: 1},
			consumed.counts(), "an event counted by its failed batch and again when handled alone")
		require.Equal(t, map[string]int{worker.RefusedUnknownPost: 1}, refused.counts())
	})
}

var errBatch = errors.New("the batch's transaction failed")
