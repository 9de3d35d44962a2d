package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// dbClockRecorder is a Publisher that notes the database's time of each call.
type dbClockRecorder struct {
	db *gorm.DB
	mu sync.Mutex
	at []time.Time
}

func (r *dbClockRecorder) Publish(ctx context.Context, _ worker.Publishing) error {
	now, err := database.Now(ctx, r.db)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, now)
	return nil
}

func (r *dbClockRecorder) calls() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...)
}

// A worker whose own clock runs minutes ahead of the database's does not
// publish before scheduledAt by the database's clock: its timer fires at
// once, the publication is found not due, and the timer is re-armed for the
// time left, so the post goes out at its time.
func TestWorkerClockAheadDoesNotPublishEarly(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &dbClockRecorder{db: db.DB}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			Now: func() time.Time { return time.Now().Add(5 * time.Minute) }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		dbNow, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		post := insertWorking(t, db.DB, dbNow.Add(2*time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))
		status, err := w.PublishDue(ctx, post.ID)
		require.ErrorIs(t, err, worker.ErrNotDue)
		require.Equal(t, worker.PublicationPending, status)

		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			20*time.Second, 10*time.Millisecond, "never published")
		calls := pub.calls()
		require.Len(t, calls, 1)
		require.False(t, calls[0].Before(post.ScheduledAt),
			"publisher called at %s by the database's clock, before scheduledAt %s", calls[0], post.ScheduledAt)
		after, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		got := loadPost(t, db.DB, post.ID)
		require.NotNil(t, got.PublishedAt)
		require.False(t, got.PublishedAt.Before(post.ScheduledAt), "publishedAt %s before %s", got.PublishedAt, post.ScheduledAt)
		require.False(t, got.PublishedAt.After(after), "publishedAt %s is in the database's future (%s): the worker's clock", got.PublishedAt, after)
		p := loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, 1, p.Attempts, "waiting for the time is no attempt")
		require.False(t, p.UpdatedAt.After(after))
		require.False(t, p.CreatedAt.After(after), "created_at from the worker's clock")
		require.Less(t, got.PublishedAt.Sub(post.ScheduledAt), 5*time.Second, "re-armed for the time left, not a retry pause")
	})
}

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
