package worker_test

import (
	"context"
	"database/sql/driver"
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

// A database blip after the publisher said yes (the connection dropped while
// the worker recorded PUBLISHED) must not make the worker call the
// publisher again: the post went out; only its record is missing. The README
// promises a second webhook POST only when the worker is killed or loses its
// partition between the POST and the commit.
func TestWorkerFailedRecordDoesNotPublishAgain(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var failed atomic.Int32
		require.NoError(t, db.DB.Callback().Raw().Before("gorm:raw").Register("test:fail_mark_published", func(tx *gorm.DB) {
			if strings.HasPrefix(tx.Statement.SQL.String(), "UPDATE posts SET status") && failed.Add(1) == 1 {
				_ = tx.AddError(driver.ErrBadConn)
			}
		}))
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
		require.NoError(t, db.DB.Callback().Raw().Before("gorm:raw").Register("test:fail_mark_published_always", func(tx *gorm.DB) {
			if strings.HasPrefix(tx.Statement.SQL.String(), "UPDATE posts SET status") {
				_ = tx.AddError(driver.ErrBadConn)
			}
		}))
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
