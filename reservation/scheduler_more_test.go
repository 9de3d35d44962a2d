package reservation_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/clocktest"
	"github.com/postingsvc/posting/reservation"
)

// A status changed between the read and the mark by a writer that did not
// bump the version (an operator's SQL, a tool) is not overwritten: the mark's
// UPDATE checks the status as well as the version.
func TestSchedulerMarkChecksTheStatusAsWellAsTheVersion(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		posts := schedInsert(t, db.DB, time.Minute)
		id := posts[0].ID
		var done atomic.Bool
		require.NoError(t, db.DB.Callback().Query().After("gorm:query").Register("sched_test_outside_cancel", func(tx *gorm.DB) {
			if tx.Statement.Table == "posts" && done.CompareAndSwap(false, true) {
				require.NoError(t, tx.Session(&gorm.Session{NewDB: true}).
					Exec("UPDATE posts SET status = ? WHERE id = ?", reservation.StatusCancelled, id).Error)
			}
		}))
		res, err := schedNew(t, db.DB, clocktest.New(schedT0)).RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, done.Load())
		require.Equal(t, reservation.SchedulerResult{Skipped: 1}, res)
		require.Equal(t, reservation.StatusCancelled, schedPost(t, db.DB, id).Status)
		require.Empty(t, schedEvents(t, db.DB)[id])
	})
}

// Without a clock of its own the scheduler asks the database what time it
// is: a post due within the lead by the database's clock is marked, a later
// one is not.
func TestSchedulerDefaultsToTheDatabaseClock(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		dbNow, err := database.Now(context.Background(), db.DB)
		require.NoError(t, err)
		mk := func(at time.Time) reservation.Post {
			p := reservation.Post{Title: "t", Content: "c", Status: reservation.StatusReserved, ScheduledAt: at,
				CreatedAt: dbNow, UpdatedAt: dbNow, Version: optimisticlock.Version{Int64: 1, Valid: true}}
			require.NoError(t, db.DB.Create(&p).Error)
			return p
		}
		soon, later := mk(dbNow.Add(4*time.Minute)), mk(dbNow.Add(10*time.Minute))
		s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Lead: 5 * time.Minute, Logger: schedQuietLogger()})
		require.NoError(t, err)
		res, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Marked)
		require.Equal(t, reservation.StatusWorking, schedPost(t, db.DB, soon.ID).Status)
		require.Equal(t, reservation.StatusReserved, schedPost(t, db.DB, later.ID).Status)
		ev := schedEvents(t, db.DB)[soon.ID]
		require.Len(t, ev, 1)
		require.WithinDuration(t, dbNow, ev[0].Created, time.Minute, "the event's time is the database's")
	})
}

// Stop interrupts a running job, waits until it has returned, and no run
// starts after it.
func TestSchedulerStopWaitsForTheRunningJob(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		schedInsert(t, db.DB, time.Minute)
		entered := make(chan struct{})
		var slowed atomic.Bool
		require.NoError(t, db.DB.Callback().Query().Before("gorm:query").Register("sched_test_slow_read", func(tx *gorm.DB) {
			if tx.Statement.Table != "posts" || !slowed.CompareAndSwap(false, true) {
				return
			}
			close(entered)
			<-tx.Statement.Context.Done() // the job's first read lasts until the run is interrupted
		}))
		var ended atomic.Int64
		s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Spec: "@every 1s", Logger: schedQuietLogger(),
			Now:     func() time.Time { return schedT0 },
			Observe: func(reservation.SchedulerResult, time.Duration, error) { ended.Add(1) }})
		require.NoError(t, err)
		require.NoError(t, s.Start(context.Background()))
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the job never ran")
		}
		require.Zero(t, ended.Load(), "the job is still in its read")
		s.Stop()
		require.Equal(t, int64(1), ended.Load(), "Stop returned only after the interrupted job had")
		time.Sleep(1500 * time.Millisecond) // more than the spec's second
		require.Equal(t, int64(1), ended.Load(), "no run after Stop")
		require.Equal(t, reservation.StatusReserved, schedPost(t, db.DB, 1).Status, "the interrupted run marked nothing")
	})
}
