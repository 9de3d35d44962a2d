package reservation

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// One tick of the schedule works off every due post, in runs of at most
// MaxPerRun each, instead of MaxPerRun posts a tick: a spike larger than
// MaxPerRun is reserved within the lead.
func TestSchedulerTickRunsAgainWhileARunStopsAtItsBound(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		dueSoon(t, db, now, 35, 0)
		runs, working := tick(t, db, SchedulerConfig{BatchSize: 5, MaxPerRun: 10, Now: func() time.Time { return now }},
			func(err error) { require.NoError(t, err) })
		require.EqualValues(t, 35, working, "one tick reserved every due post")
		require.Equal(t, []SchedulerResult{{Marked: 10, More: true}, {Marked: 10, More: true}, {Marked: 10, More: true}, {Marked: 5}}, runs)
	})
}

// A post that cannot be marked fails the run it is in, but does not stop the
// tick: the runs that follow at once while a run stops at its bound still
// follow, each marking the rest. One bad row (it stays RESERVED, the oldest
// due post, in the first batch of every run) must not slow a spike down to
// MaxPerRun posts a tick.
func TestSchedulerTickRunsAgainPastAPostItCannotMark(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		posts := dueSoon(t, db, now, 35, time.Second)
		bad := posts[5].ID
		require.NotEqual(t, int64(1), bad, "the post's id must not be a version of the (id, version) pairs")
		databasetest.Fail(t, db.DB, databasetest.StmtExec, errors.New("sched test: bad row"), func(tx *gorm.DB) bool {
			return markWorking(tx.Statement.SQL.String()) && varsHold(tx.Statement.Vars, bad)
		})
		runs, working := tick(t, db, SchedulerConfig{BatchSize: 5, MaxBatchSize: 5, MaxPerRun: 10, Now: func() time.Time { return now }},
			func(err error) { require.ErrorContains(t, err, "sched test: bad row") })
		require.EqualValues(t, 34, working, "one tick reserved every due post but the bad one")
		require.Equal(t, []SchedulerResult{{Marked: 9, Failed: 1, More: true}, {Marked: 9, Failed: 1, More: true},
			{Marked: 9, Failed: 1, More: true}, {Marked: 7, Failed: 1}}, runs)
	})
}

// tick runs one tick of a scheduler of cfg on db, as its schedule does, and
// returns the result of each of its runs (each run's error goes to
// checkErr) and the posts WORKING afterwards.
func tick(t *testing.T, db *database.DB, cfg SchedulerConfig, checkErr func(error)) (runs []SchedulerResult, working int64) {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Observe = func(res SchedulerResult, _ time.Duration, err error) {
		checkErr(err)
		runs = append(runs, res)
	}
	s, err := NewScheduler(db.DB, cfg)
	require.NoError(t, err)
	s.run(context.Background(), s.cfg.Logger)
	require.NoError(t, db.Model(&Post{}).Where("status = ?", StatusWorking).Count(&working).Error)
	return runs, working
}

// markWorking reports whether sql is the scheduler's UPDATE of a post's
// status (one post or a batch), through the primary key where the database
// is told which index to read (Driver.ThroughIndex).
func markWorking(sql string) bool {
	return strings.HasPrefix(sql, "UPDATE posts SET status") || strings.HasPrefix(sql, "UPDATE posts FORCE INDEX (PRIMARY) SET status")
}

// varsHold reports whether id is one of a statement's vars, or an element of
// one that is a list.
func varsHold(vars []any, id int64) bool {
	for _, v := range vars {
		rv := reflect.ValueOf(v)
		switch {
		case rv.Kind() == reflect.Int64 && rv.Int() == id:
			return true
		case rv.Kind() == reflect.Slice:
			for i := range rv.Len() {
				if e := reflect.Indirect(rv.Index(i)); e.Kind() == reflect.Int64 && e.Int() == id {
					return true
				}
			}
		}
	}
	return false
}

// dueSoon writes n RESERVED posts due a minute after now, each step after
// the one before, and returns them with their ids.
func dueSoon(t *testing.T, db *database.DB, now time.Time, n int, step time.Duration) []Post {
	t.Helper()
	posts := make([]Post, n)
	for i := range posts {
		posts[i] = Post{Title: "t", Content: "c", Status: StatusReserved, ScheduledAt: now.Add(time.Minute + time.Duration(i)*step),
			CreatedAt: now, UpdatedAt: now}
	}
	require.NoError(t, db.CreateInBatches(posts, 100).Error)
	return posts
}
