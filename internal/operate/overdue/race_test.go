package overdue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A worker's claim made in time that commits between the expirer's read of
// a post and its write leaves the post to the worker: the expiry must not
// land on a claimed post, or the receiver is called for an EXPIRED one. The
// claim changes neither status nor version, so the expirer's write checks
// the claim itself.
func TestExpiryLeavesAPostClaimedBetweenItsReadAndItsWrite(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		late := f.post(reservation.StatusWorking, -time.Hour, dur(-time.Minute))
		var claimed atomic.Bool
		databasetest.Before(t, db.DB, databasetest.StmtExec, func(tx *gorm.DB) {
			if !databasetest.SQLStarts("UPDATE posts SET status")(tx) || !claimed.CompareAndSwap(false, true) {
				return
			}
			// The worker's claim, its statement's time before the deadline
			// (a statement that waited for a lock commits late), from another
			// connection. SQLite's writer holds the one write lock: the claim
			// waits for it and cannot slip in, so it runs on its own.
			done := make(chan error, 1)
			go func() {
				done <- db.DB.Exec("UPDATE posts SET publish_claimed_at = ? WHERE id = ? AND status = ? AND publish_claimed_at IS NULL",
					f.now.Add(-2*time.Minute), late, reservation.StatusWorking).Error
			}()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Second):
			}
		})
		_, err := newChecker(t, db, "a", 0).RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, claimed.Load(), "the hook ran")
		require.Eventually(t, func() bool {
			return databasetest.Load[reservation.Post](t, db.DB, late).PublishClaimedAt != nil ||
				databasetest.Load[reservation.Post](t, db.DB, late).Status == reservation.StatusExpired
		}, 10*time.Second, 50*time.Millisecond)
		p := databasetest.Load[reservation.Post](t, db.DB, late)
		if p.PublishClaimedAt != nil {
			require.Equal(t, reservation.StatusWorking, p.Status, "a claimed post is the worker's to decide")
		}
	})
}

// Checkers that all believe they hold the lease (one stalled past its TTL
// while another took over, or two serves given one POSTING_INSTANCE_ID)
// and run at once announce each lost post once and expire each late post
// once, with one EXPIRED event.
func TestCheckersRunningAtOnceRepairEachPostOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		var lost, late []int64
		for i := range 20 {
			id := f.post(reservation.StatusWorking, -10*time.Minute+time.Duration(i)*time.Second, nil)
			f.reservation(id, outbox.StatusSent, -9*time.Minute)
			lost = append(lost, id)
			late = append(late, f.post(reservation.StatusWorking, -time.Hour, dur(-time.Minute)))
		}
		const n = 4
		errs := make(chan error, n)
		results := make(chan overdue.Result, n)
		for range n {
			c := newChecker(t, db, "same", 3)
			go func() {
				res, err := c.RunOnce(context.Background())
				results <- res
				errs <- err
			}()
		}
		reannounced, expired := 0, 0
		for range n {
			require.NoError(t, <-errs)
			r := <-results
			reannounced += r.Reannounced
			expired += r.Expired
		}
		require.Equal(t, len(lost), reannounced)
		require.Equal(t, len(late), expired)
		var events int64
		require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id IN ? AND event_type = ?", lost, event.ReservationEvent).Count(&events).Error)
		require.Equal(t, int64(2*len(lost)), events, "one announcement more per lost post")
		require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id IN ? AND event_type = ?", late, event.PostingEvent).Count(&events).Error)
		require.Equal(t, int64(len(late)), events, "one EXPIRED event per late post")
	})
}
