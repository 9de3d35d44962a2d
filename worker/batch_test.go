package worker_test

import (
	"context"
	"database/sql/driver"
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
		databasetest.Before(t, db.DB, databasetest.StmtExec, func(tx *gorm.DB) {
			if markPublished(tx) {
				writes.Add(1)
			}
		})
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

// A database blip after the publisher said yes (the connection dropped while
// the worker recorded PUBLISHED) must not make the worker call the
// publisher again: the post went out; only its record is missing. The README
// promises a second webhook POST only when the worker is killed or loses its
// partition between the POST and the commit.
func TestWorkerFailedRecordDoesNotPublishAgain(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var failed atomic.Int32
		databasetest.Fail(t, db.DB, databasetest.StmtExec, driver.ErrBadConn, func(tx *gorm.DB) bool {
			return markPublished(tx) && failed.Add(1) == 1
		})
		pub := &recorder{}
		w := newWorker(t, db.DB, pub)
		ctx := context.Background()
		post := insertWorking(t, db.DB, time.Now().Add(-time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))

		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			20*time.Second, 10*time.Millisecond, "never published")
		require.GreaterOrEqual(t, failed.Load(), int32(2), "the record failed once, then was written")
		require.Equal(t, 1, pub.count(post.ID), "the publisher was called again after a failed record")
		p := loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, 1, p.Attempts)
	})
}

// markPublished is the worker's write of PUBLISHED to posts.
var markPublished = databasetest.SQLStarts("UPDATE posts SET status")

// signalling is a Publisher that says yes and tells of each call.
type signalling struct{ called chan struct{} }

func (s signalling) Publish(context.Context, worker.Publishing) error {
	select {
	case s.called <- struct{}{}:
	default:
	}
	return nil
}

// While the database is down, retrying the PUBLISHED write must not hold
// Stop (or a revocation) for the write's whole 30 s: once the timer is
// disarmed the write gets one last try and the attempt ends.
func TestWorkerStopDoesNotWaitOutAFailingRecord(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		databasetest.Fail(t, db.DB, databasetest.StmtExec, driver.ErrBadConn, markPublished)
		pub := signalling{called: make(chan struct{}, 1)}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet()})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()
		post := insertWorking(t, db.DB, time.Now().Add(-time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))
		select {
		case <-pub.called:
		case <-time.After(20 * time.Second):
			t.Fatal("the publisher was never called")
		}
		stopped := make(chan struct{})
		go func() { w.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(15 * time.Second): // the write alone may take 30 s
			t.Fatal("Stop waited for the failing write to give up")
		}
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, post.ID).Status)
	})
}
