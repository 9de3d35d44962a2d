package worker_test

import (
	"context"
	"strings"
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

// Posts due at the same instant are published in batches: each exactly once,
// none before its time by the database's clock, and with fewer PUBLISHED
// writes than posts; a post cancelled before its time is not published.
func TestBatchedPublishingPublishesEachPostOnceNotEarly(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		const n = 400
		var writes atomic.Int64
		require.NoError(t, db.DB.Callback().Raw().Before("gorm:raw").Register("batch_test_count", func(tx *gorm.DB) {
			if strings.HasPrefix(tx.Statement.SQL.String(), "UPDATE posts SET status") {
				writes.Add(1)
			}
		}))
		far := databasetest.Now(t, db.DB).Add(time.Hour)
		posts := make([]*reservation.Post, n)
		for i := range posts {
			posts[i] = insertWorking(t, db.DB, far)
		}
		rec := &recorder{}
		w := newWorker(t, db.DB, rec)
		ctx := context.Background()
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{0}))
		cancelled := map[int64]bool{}
		for i := 0; i < n; i += 10 {
			require.NoError(t, db.Exec("UPDATE posts SET status = ?, version = version + 1 WHERE id = ?", reservation.StatusCancelled, posts[i].ID).Error)
			cancelled[posts[i].ID] = true
		}
		for _, p := range posts {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
		}
		// All due a second from now: re-armed from the table by a new
		// assignment, as after a restart.
		due := databasetest.Now(t, db.DB).Add(time.Second)
		require.NoError(t, db.Exec("UPDATE posts SET scheduled_at = ?", due).Error)
		require.NoError(t, db.Exec("UPDATE publications SET scheduled_at = ?", due).Error)
		w.Revoked("posting-events", []int32{0})
		writes.Store(0)
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{0}))

		deadline := time.Now().Add(time.Minute)
		for {
			var left int64
			require.NoError(t, db.Model(&worker.Publication{}).Where("status = ?", worker.PublicationPending).Count(&left).Error)
			if left == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%d publications still pending", left)
			time.Sleep(20 * time.Millisecond) // polling the condition
		}
		for _, p := range posts {
			got := loadPost(t, db.DB, p.ID)
			var pub worker.Publication
			require.NoError(t, db.Where("post_id = ?", p.ID).Take(&pub).Error)
			if cancelled[p.ID] {
				require.Equal(t, reservation.StatusCancelled, got.Status)
				require.Equal(t, worker.PublicationCancelled, pub.Status)
				require.Zero(t, rec.count(p.ID), "post %d was cancelled", p.ID)
				continue
			}
			require.Equal(t, reservation.StatusPublished, got.Status, "post %d", p.ID)
			require.Equal(t, worker.PublicationPublished, pub.Status)
			require.Equal(t, 1, rec.count(p.ID), "post %d", p.ID)
			require.NotNil(t, got.PublishedAt)
			require.False(t, got.PublishedAt.Before(got.ScheduledAt), "post %d published at %s, due %s", p.ID, got.PublishedAt, got.ScheduledAt)
		}
		published := n - len(cancelled)
		require.Equal(t, published, rec.total())
		require.Less(t, writes.Load(), int64(published)/4, "the PUBLISHED writes were batched")
		t.Logf("%d posts published with %d UPDATE statements", published, writes.Load())
	})
}
