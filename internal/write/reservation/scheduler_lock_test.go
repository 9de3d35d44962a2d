package reservation_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A scheduler's later batch reads the due posts after its cursor with FOR
// UPDATE SKIP LOCKED, and holds only the posts it reads. Posts due before
// its cursor that are free (a request held them while the batch before
// passed, or they were made due during the run) belong to whichever runner
// reads them next. Here 20 become due just before one runner's second batch
// reads, and another instance runs while that batch is open. It must mark
// every one of them at once: were they locked by the open batch, the other
// run would pass them over, end, and leave them RESERVED until a later tick,
// which for a post due within the minute is past its time. Nor may it wait
// for the open batch: a full one holds the posts it read, a short one has
// read on past the last due post, to where the posts marked WORKING go.
// Waiting, the other run would reach its deadline (without one, the lock
// wait's timeout, and then the same wait post by post).
func TestSchedulerLaterBatchLocksOnlyThePostsItReads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		due  int // the holder's first batch is 50; the second reads up to 100
	}{{"full", 200}, {"short", 60}} {
		for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
			t.Run(c.name+"/"+string(d), func(t *testing.T) {
				t.Parallel()
				otherInstanceMarksWhileABatchIsOpen(t, d, c.due)
			})
		}
	}
}

func otherInstanceMarksWhileABatchIsOpen(t *testing.T, d database.Dialect, due int) {
	pools := databasetest.Pools(t, databasetest.URL(t, d, "schedlock"), 2)
	holder, other := setupScheduler(t, pools[0].DB), setupScheduler(t, pools[1].DB)
	holder.insert(t, offsetsOf(due, func(i int) time.Duration { return time.Minute + time.Duration(i)*time.Millisecond })...)
	// The early posts wait, scheduled past the horizon, until the holder's
	// first batch has committed.
	early := holder.insert(t, offsetsOf(20, func(int) time.Duration { return time.Hour })...)
	earlyIDs := make([]int64, len(early))
	for i, p := range early {
		earlyIDs[i] = p.ID
	}
	otherRun := other.scheduler(t)
	var (
		reads     atomic.Int32
		otherRes  reservation.SchedulerResult
		otherErr  error
		earlyDone int64
		stmtErrs  []error
	)
	isDueRead := func(tx *gorm.DB) bool {
		_, locking := tx.Statement.Clauses["FOR"]
		return locking && tx.Statement.Schema != nil && tx.Statement.Schema.Table == "posts"
	}
	databasetest.Before(t, pools[0].DB, databasetest.StmtQuery, func(tx *gorm.DB) {
		if !isDueRead(tx) || reads.Add(1) != 2 {
			return
		}
		// Overdue now: they sort before the holder's cursor.
		require.NoError(t, pools[1].DB.Model(&reservation.Post{}).Where("id IN ?", earlyIDs).
			Update("scheduled_at", holder.clock.Now().Add(-time.Minute)).Error)
	})
	databasetest.After(t, pools[1].DB, databasetest.StmtAll, func(tx *gorm.DB) {
		if tx.Error != nil {
			stmtErrs = append(stmtErrs, tx.Error)
		}
	})
	databasetest.After(t, pools[0].DB, databasetest.StmtQuery, func(tx *gorm.DB) {
		if !isDueRead(tx) || reads.Load() != 2 || tx.Error != nil {
			return
		}
		// The holder's second batch is read and its transaction open:
		// another instance runs now. 20 seconds is far more than its
		// posts take, and far less than the lock wait's timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		otherRes, otherErr = otherRun.RunOnce(ctx)
		otherErr = errors.Join(otherErr, pools[1].DB.Model(&reservation.Post{}).
			Where("id IN ? AND status = ?", earlyIDs, reservation.StatusWorking).Count(&earlyDone).Error)
	})

	res, err := holder.scheduler(t).RunOnce(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, reads.Load(), int32(2), "the holder read a first batch and a second")
	require.NoError(t, otherErr, "the other instance's run while the holder's batch was open")
	require.NoError(t, errors.Join(stmtErrs...), "a statement of the other instance failed")
	require.EqualValues(t, len(early), earlyDone,
		"the other instance marked %d of the %d early posts while the holder's batch was open (it marked %d)",
		earlyDone, len(early), otherRes.Marked)
	require.Equal(t, due+len(early), res.Marked+otherRes.Marked)
	counts, _ := postsByStatus(t, pools[0].DB, holder.events(t), nil)
	require.Equal(t, map[reservation.Status]int{reservation.StatusWorking: due + len(early)}, counts)
}
