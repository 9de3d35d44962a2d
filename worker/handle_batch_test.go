package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/worker"
)

// A batch is recorded in one go, in its order: a reservation followed by
// the post's cancellation leaves the publication CANCELLED and no timer, a
// reservation alone a PENDING publication with its timer, and a malformed
// reservation (no scheduledAt) is reported and not recorded. The same batch
// delivered again changes nothing.
func TestWorkerHandleBatchRecordsInOrderOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		w := newWorker(t, db.DB, &recorder{})
		ctx := context.Background()
		kept := insertWorking(t, db.DB, time.Now().Add(time.Hour))
		cancelled := insertWorking(t, db.DB, time.Now().Add(time.Hour))
		bad := insertWorking(t, db.DB, time.Now().Add(time.Hour))
		evs := []inbox.Event{
			decode(t, reservationRecord(t, kept), 0),
			decode(t, reservationRecord(t, cancelled), 0),
			decode(t, cancelRecord(t, cancelled), 0),
			decode(t, message(t, event.ReservationEvent, bad, event.ReservationEventFields{}), 0),
		}
		check := func() {
			t.Helper()
			require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, kept.ID).Status)
			require.Equal(t, worker.PublicationCancelled, loadPublication(t, db.DB, cancelled.ID).Status)
			var pubs, rows int64
			require.NoError(t, db.Model(&worker.Publication{}).Count(&pubs).Error)
			require.EqualValues(t, 2, pubs, "the malformed reservation scheduled nothing")
			require.NoError(t, db.Model(&inbox.Record{}).Count(&rows).Error)
			require.EqualValues(t, 3, rows)
			require.Equal(t, 1, w.Pending(), "only the kept post has a timer")
		}
		malformed, err := w.HandleBatch(ctx, evs)
		require.NoError(t, err)
		require.Len(t, malformed, len(evs))
		require.NoError(t, malformed[0])
		require.NoError(t, malformed[2])
		require.ErrorIs(t, malformed[3], inbox.ErrMalformed)
		check()

		malformed, err = w.HandleBatch(ctx, evs) // redelivered
		require.NoError(t, err)
		require.ErrorIs(t, malformed[3], inbox.ErrMalformed)
		check()
	})
}
