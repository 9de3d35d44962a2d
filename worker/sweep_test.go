package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// refuser is a Publisher that refuses every post while refuse is set.
type refuser struct {
	recorder
	refuse atomic.Bool
}

func (r *refuser) Publish(ctx context.Context, p worker.Publishing) error {
	if r.refuse.Load() {
		return fmt.Errorf("%w: receiver says no to post %d", worker.ErrRefused, p.Post.ID)
	}
	return r.recorder.Publish(ctx, p)
}

// retry sets a FAILED publication back to PENDING in the database only, as
// `posting publications retry` does.
func retry(t *testing.T, db *gorm.DB, postID int64) {
	t.Helper()
	res := db.Model(&worker.Publication{}).Where("post_id = ? AND status = ?", postID, worker.PublicationFailed).
		Updates(map[string]any{"status": worker.PublicationPending, "attempts": 0, "last_error": nil})
	require.NoError(t, res.Error)
	require.EqualValues(t, 1, res.RowsAffected)
}

// A publication set back to PENDING directly in the database (an operator's
// retry of a FAILED one) is published by the running worker that owns its
// partition, found by the periodic sweep; a worker that does not own the
// partition (never assigned, or revoked) leaves it alone.
func TestWorkerSweepPublishesRowsSetBackToPending(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &refuser{}
		pub.refuse.Store(true)
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), SweepInterval: 50 * time.Millisecond,
			RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{4}))

		owned := insertWorking(t, db.DB, time.Now())
		other := insertWorking(t, db.DB, time.Now()) // partition 5: not this worker's
		later := insertWorking(t, db.DB, time.Now()) // partition 4, retried after the revocation
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, owned), 4)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, other), 5)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, later), 4)))
		for _, p := range []*reservation.Post{owned, other, later} {
			require.Eventually(t, func() bool { return loadPublication(t, db.DB, p.ID).Status == worker.PublicationFailed },
				10*time.Second, 10*time.Millisecond)
		}
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)

		pub.refuse.Store(false)
		retry(t, db.DB, owned.ID)
		retry(t, db.DB, other.ID)
		require.Eventually(t, func() bool { return loadPost(t, db.DB, owned.ID).Status == reservation.StatusPublished },
			10*time.Second, 10*time.Millisecond, "the retried publication was never published")
		p := loadPublication(t, db.DB, owned.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, 1, p.Attempts)
		require.Nil(t, p.LastError)

		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
		n, err := w.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "armed a publication of a partition it does not own")
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, other.ID).Status)

		w.Revoked("posting-events", []int32{4})
		retry(t, db.DB, later.ID)
		n, err = w.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "armed a publication of a revoked partition")
		require.Zero(t, w.Pending())

		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{4, 5}))
		for _, p := range []*reservation.Post{other, later} {
			require.Eventually(t, func() bool { return loadPost(t, db.DB, p.ID).Status == reservation.StatusPublished },
				10*time.Second, 10*time.Millisecond)
		}
		for _, p := range []*reservation.Post{owned, other, later} {
			require.Equal(t, 1, pub.count(p.ID))
		}
	})
}
