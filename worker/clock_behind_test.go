package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// A worker whose own clock runs minutes behind the database's still
// publishes at scheduledAt by the database's clock, not minutes late: the
// scheduler and the relay go by the database's clock, so the reservation
// arrives on time, and the worker's timer must not add its own clock's lag
// (its timers are set from the database's clock, not its own).
func TestWorkerClockBehindPublishesOnTime(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &dbClockRecorder{db: db.DB}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			Now: func() time.Time { return time.Now().Add(-3 * time.Minute) }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		dbNow, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		post := insertWorking(t, db.DB, dbNow.Add(time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))

		// Generous: the post is due in 1 s; a worker 3 minutes behind waits 3 minutes more.
		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			30*time.Second, 20*time.Millisecond, "not published within 30 s of a time 1 s away: the timer follows the worker's clock, 3 minutes behind")
		calls := pub.calls()
		require.Len(t, calls, 1)
		require.False(t, calls[0].Before(post.ScheduledAt), "published early: %s before %s", calls[0], post.ScheduledAt)
		require.Equal(t, worker.PublicationPublished, loadPublication(t, db.DB, post.ID).Status)
	})
}
