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

// Posts due at the same instant share one alarm: a post cancelled before it
// rings is left out and the others are published once each, not early.
func TestPostsDueTogetherPublishedWithoutTheOneCancelled(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		at := databasetest.Now(t, db.DB).Add(800 * time.Millisecond)
		a, b, c := insertWorking(t, db.DB, at), insertWorking(t, db.DB, at), insertWorking(t, db.DB, at)
		rec := &recorder{}
		w := newWorker(t, db.DB, rec)
		ctx := context.Background()
		for _, p := range []*reservation.Post{a, b, c} {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
		}
		require.Equal(t, 3, w.Pending())
		require.NoError(t, db.Exec("UPDATE posts SET status = ?, version = version + 1 WHERE id = ?", reservation.StatusCancelled, b.ID).Error)
		require.NoError(t, w.Handle(ctx, decode(t, cancelRecord(t, b), 0)))
		require.Equal(t, 2, w.Pending(), "the cancelled post's timer is disarmed")

		require.Eventually(t, func() bool {
			return loadPost(t, db.DB, a.ID).Status == reservation.StatusPublished &&
				loadPost(t, db.DB, c.ID).Status == reservation.StatusPublished
		}, 30*time.Second, 10*time.Millisecond)
		for _, p := range []*reservation.Post{a, c} {
			got := loadPost(t, db.DB, p.ID)
			require.False(t, got.PublishedAt.Before(p.ScheduledAt), "published before its time")
			require.Equal(t, 1, rec.count(p.ID))
		}
		require.Zero(t, rec.count(b.ID), "the cancelled post was published")
		require.Equal(t, reservation.StatusCancelled, loadPost(t, db.DB, b.ID).Status)
		require.Equal(t, worker.PublicationCancelled, loadPublication(t, db.DB, b.ID).Status)
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
	})
}

// Revoking the partition of every post of an alarm stops it: none of them is
// published after their time has passed, and a later assignment publishes
// them.
func TestAlarmOfRevokedPostsDoesNotRing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		at := databasetest.Now(t, db.DB).Add(500 * time.Millisecond)
		a, b := insertWorking(t, db.DB, at), insertWorking(t, db.DB, at)
		rec := &recorder{}
		w := newWorker(t, db.DB, rec)
		ctx := context.Background()
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{3}))
		for _, p := range []*reservation.Post{a, b} {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 3)))
		}
		require.Equal(t, 2, w.Pending())
		w.Revoked("posting-events", []int32{3})
		require.Zero(t, w.Pending())
		time.Sleep(time.Until(database.Normalize(time.Now()).Add(time.Second))) // past their time
		require.Zero(t, rec.total(), "a revoked post was published")
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, a.ID).Status)

		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{3}))
		require.Eventually(t, func() bool {
			return loadPost(t, db.DB, a.ID).Status == reservation.StatusPublished &&
				loadPost(t, db.DB, b.ID).Status == reservation.StatusPublished
		}, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, rec.count(a.ID))
		require.Equal(t, 1, rec.count(b.ID))
	})
}
