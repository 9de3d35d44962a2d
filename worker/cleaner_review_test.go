package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// The cleaner deletes a published post's inbox row and publication after the
// retention; when its reservation event is delivered again later (a consumer
// group reset, a replay), the worker takes it for new, but the post says
// PUBLISHED: nothing is published a second time, and the outcome counter
// (posting_worker_publications_total{outcome}) does not count a second
// publication either.
func TestWorkerRedeliveryAfterTheCleanerPublishesNothing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		var mu sync.Mutex
		outcomes := map[string]int{}
		pub := &recorder{}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			ObserveSettled: func(o string) { mu.Lock(); outcomes[o]++; mu.Unlock() }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)

		post := insertWorking(t, db.DB, time.Now().Add(-time.Second))
		rec := reservationRecord(t, post)
		require.NoError(t, w.Handle(ctx, decode(t, rec, 0)))
		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			20*time.Second, 10*time.Millisecond)

		// The retention has passed for both rows.
		later := time.Now().Add(time.Hour)
		n, err := inbox.Purge(ctx, db.DB, later, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = worker.PurgePublications(ctx, db.DB, later, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		require.NoError(t, w.Handle(ctx, decode(t, rec, 0)))
		require.Eventually(t, func() bool {
			var p []worker.Publication
			require.NoError(t, db.DB.Where("post_id = ?", post.ID).Find(&p).Error)
			return len(p) == 1 && p[0].Status != worker.PublicationPending
		}, 20*time.Second, 10*time.Millisecond, "the re-created publication is settled")
		w.Stop()

		require.Equal(t, 1, pub.count(post.ID), "published again")
		require.Equal(t, worker.PublicationPublished, loadPublication(t, db.DB, post.ID).Status)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string]int{worker.OutcomePublished: 1}, outcomes, "one publication, counted once")
	})
}
