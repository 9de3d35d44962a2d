package reservation_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/migrations"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
)

type schedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *schedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *schedClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var schedT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// schedInsert writes RESERVED posts scheduled at the given offsets from schedT0.
func schedInsert(t *testing.T, db *gorm.DB, offsets ...time.Duration) []reservation.Post {
	t.Helper()
	posts := make([]reservation.Post, len(offsets))
	for i, off := range offsets {
		posts[i] = reservation.Post{Title: "t", Content: "c", Status: reservation.StatusReserved,
			ScheduledAt: schedT0.Add(off), CreatedAt: schedT0, UpdatedAt: schedT0,
			Version: optimisticlock.Version{Int64: 1, Valid: true}}
	}
	require.NoError(t, db.CreateInBatches(posts, 500).Error)
	return posts
}

func schedEvents(t *testing.T, db *gorm.DB) map[int64][]outbox.Message {
	t.Helper()
	var rows []outbox.Message
	require.NoError(t, db.Where("event_type = ?", outbox.ReservationEvent).Order("id").Find(&rows).Error)
	out := map[int64][]outbox.Message{}
	for _, r := range rows {
		out[r.AggregateID] = append(out[r.AggregateID], r)
	}
	return out
}

func schedStatus(t *testing.T, db *gorm.DB, id int64) reservation.Status {
	t.Helper()
	var p reservation.Post
	require.NoError(t, db.First(&p, id).Error)
	return p.Status
}

func schedNew(t *testing.T, db *gorm.DB, clock *schedClock) *reservation.Scheduler {
	t.Helper()
	s, err := reservation.NewScheduler(db, reservation.SchedulerConfig{Lead: 5 * time.Minute, BatchSize: 50, Now: clock.Now})
	require.NoError(t, err)
	return s
}

func TestSchedulerMarksDuePostsOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		clock := &schedClock{now: schedT0}
		posts := schedInsert(t, db.DB,
			3*time.Minute, // due within the lead
			5*time.Minute, // exactly at the lead
			-time.Hour,    // overdue: the service was down
			6*time.Minute, // outside the lead
			2*time.Minute, // due, but cancelled below
		)
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("id = ?", posts[4].ID).
			Updates(map[string]any{"status": reservation.StatusCancelled, "version": gorm.Expr("version + 1")}).Error)

		s := schedNew(t, db.DB, clock)
		res, err := s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 3}, res)

		events := schedEvents(t, db.DB)
		for _, p := range posts[:3] {
			require.Equal(t, reservation.StatusWorking, schedStatus(t, db.DB, p.ID))
			require.Len(t, events[p.ID], 1)
			var payload map[string]any
			require.NoError(t, json.Unmarshal([]byte(events[p.ID][0].Payload), &payload))
			require.Equal(t, events[p.ID][0].EventID, payload["eventId"])
			require.Equal(t, "POSTING_RESERVATION_EVENT", payload["eventType"])
			require.EqualValues(t, p.ID, payload["postId"])
			require.Equal(t, schedT0.Format(time.RFC3339), payload["occurredAt"])
			require.Equal(t, p.ScheduledAt.UTC().Format(time.RFC3339), payload["scheduledAt"])
		}
		require.Equal(t, reservation.StatusReserved, schedStatus(t, db.DB, posts[3].ID))
		require.Empty(t, events[posts[3].ID])
		require.Equal(t, reservation.StatusCancelled, schedStatus(t, db.DB, posts[4].ID))
		require.Empty(t, events[posts[4].ID], "a cancelled post never gets a reservation event")

		// A second run finds nothing new; a minute later the outside one is due.
		res, err = s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{}, res)
		clock.Add(time.Minute)
		res, err = s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Marked)
		require.Len(t, schedEvents(t, db.DB), 4)
		require.Equal(t, reservation.StatusCancelled, schedStatus(t, db.DB, posts[4].ID))
	})
}

// A post changed between the scheduler's read and its update is skipped
// without an event: the version check refuses the stale write.
func TestSchedulerSkipsAPostChangedAfterTheRead(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		posts := schedInsert(t, db.DB, time.Minute, 2*time.Minute)
		bumped := false
		require.NoError(t, db.DB.Callback().Update().Before("gorm:update").Register("sched_test_bump", func(tx *gorm.DB) {
			if bumped || tx.Statement.Table != "posts" {
				return
			}
			bumped = true
			// Another writer (a reschedule) commits first.
			require.NoError(t, tx.Session(&gorm.Session{NewDB: true, SkipHooks: true}).Exec(
				"UPDATE posts SET version = version + 1, scheduled_at = ? WHERE id = ?", schedT0.Add(4*time.Minute), posts[0].ID).Error)
		}))
		s := schedNew(t, db.DB, &schedClock{now: schedT0})
		res, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 1, Skipped: 1}, res)
		require.Equal(t, reservation.StatusReserved, schedStatus(t, db.DB, posts[0].ID))
		require.Empty(t, schedEvents(t, db.DB)[posts[0].ID])
		require.Len(t, schedEvents(t, db.DB)[posts[1].ID], 1)
	})
}

// Two schedulers with separate pools against 1,000 due posts, while a third
// party cancels some of them: every post ends WORKING with exactly one event
// or CANCELLED with none.
func TestTwoSchedulersConcurrentlyYieldOneEventPerPost(t *testing.T) {
	t.Parallel()
	url := databasetest.MySQLURL(t, "sched")
	var pools []*database.DB
	for range 3 {
		db, err := database.Open(url, "")
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		pools = append(pools, db)
	}
	_, err := pools[0].Migrate(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, migrations.MySQL, pools[0].Dialect)

	offsets := make([]time.Duration, 1000)
	for i := range offsets {
		offsets[i] = time.Duration(i%240) * time.Second
	}
	posts := schedInsert(t, pools[0].DB, offsets...)
	clock := &schedClock{now: schedT0}

	var wg sync.WaitGroup
	for _, db := range pools[:2] {
		s := schedNew(t, db.DB, clock)
		wg.Go(func() {
			for range 3 {
				_, err := s.RunOnce(context.Background())
				require.NoError(t, err)
			}
		})
	}
	svc, err := reservation.NewService(pools[2].DB, reservation.ServiceConfig{Now: clock.Now})
	require.NoError(t, err)
	wg.Go(func() {
		for i := 0; i < len(posts); i += 10 {
			_, _ = svc.Cancel(context.Background(), posts[i].ID) // may lose to the scheduler: a conflict
		}
	})
	wg.Wait()

	events := schedEvents(t, pools[0].DB)
	var all []reservation.Post
	require.NoError(t, pools[0].DB.Find(&all).Error)
	working := 0
	for _, p := range all {
		switch p.Status {
		case reservation.StatusWorking:
			working++
			require.Len(t, events[p.ID], 1, "post %d", p.ID)
		case reservation.StatusCancelled:
			// Cancelled while RESERVED: no event; cancelled after the
			// scheduler made it WORKING: its one event.
			require.LessOrEqual(t, len(events[p.ID]), 1, "post %d", p.ID)
		default:
			t.Fatalf("post %d left %s", p.ID, p.Status)
		}
	}
	require.GreaterOrEqual(t, len(events), working)
	t.Logf("%d WORKING with one event each, %d cancelled", working, len(all)-working)
}

func TestSchedulerStartStop(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	posts := schedInsert(t, db.DB, time.Minute)
	s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Spec: "@every 1s",
		Now: func() time.Time { return schedT0 }})
	require.NoError(t, err)
	s.Stop() // before Start: safe

	s2, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Spec: "@every 1s",
		Now: func() time.Time { return schedT0 }})
	require.NoError(t, err)
	require.NoError(t, s2.Start(context.Background()))
	require.Eventually(t, func() bool {
		return schedStatus(t, db.DB, posts[0].ID) == reservation.StatusWorking
	}, 10*time.Second, 20*time.Millisecond)
	s2.Stop()
	s2.Stop()
}

func TestSchedulerConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []reservation.SchedulerConfig{
		{Spec: "every minute"},
		{Lead: -time.Second},
		{BatchSize: 5000},
	} {
		_, err := reservation.NewScheduler(nil, c)
		require.ErrorContains(t, err, "invalid scheduler config")
	}
}
