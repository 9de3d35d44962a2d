package overdue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
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
