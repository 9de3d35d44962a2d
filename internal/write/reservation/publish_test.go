package reservation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// MarkPublished marks the WORKING posts of a batch PUBLISHED at one instant
// with their version bumped, and leaves a post cancelled meanwhile as it is,
// reporting its status so that the worker settles its publication.
func TestMarkPublishedMarksWorkingPostsAndLeavesCancelledOnes(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		var ids []int64
		for range 3 {
			p, err := e.svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: svcStart.Add(time.Hour)})
			require.NoError(t, err)
			ids = append(ids, p.ID)
		}
		db := e.db.DB
		require.NoError(t, db.Exec("UPDATE posts SET status = ? WHERE id IN ?", reservation.StatusWorking, ids[:2]).Error)
		require.NoError(t, db.Exec("UPDATE posts SET status = ? WHERE id = ?", reservation.StatusCancelled, ids[2]).Error)
		before, err := reservation.LoadPost(db, ids[0])
		require.NoError(t, err)

		at := database.Normalize(svcStart.Add(2 * time.Hour))
		published, status, err := reservation.MarkPublished(db, ids, at)
		require.NoError(t, err)
		require.Equal(t, map[int64]bool{ids[0]: true, ids[1]: true}, published)
		require.Equal(t, reservation.StatusCancelled, status[ids[2]])
		for _, id := range ids[:2] {
			p, err := reservation.LoadPost(db, id)
			require.NoError(t, err)
			require.Equal(t, reservation.StatusPublished, p.Status)
			require.True(t, p.PublishedAt.Equal(at), "publishedAt %v", p.PublishedAt)
		}
		after, err := reservation.LoadPost(db, ids[0])
		require.NoError(t, err)
		require.Equal(t, before.Version.Int64+1, after.Version.Int64, "version bumped")
		cancelled, err := reservation.LoadPost(db, ids[2])
		require.NoError(t, err)
		require.Equal(t, reservation.StatusCancelled, cancelled.Status)
		require.Nil(t, cancelled.PublishedAt)

		// Again at the same instant (a retried transaction): all reported as
		// before, nothing changed.
		published, _, err = reservation.MarkPublished(db, ids[:2], at)
		require.NoError(t, err)
		require.Equal(t, map[int64]bool{ids[0]: true, ids[1]: true}, published)
	})
}
