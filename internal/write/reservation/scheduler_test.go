package reservation_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// schedBundle is what a scheduler test works with: a database and the
// clock its schedulers read, standing at clocktest.T0.
type schedBundle struct {
	db    *gorm.DB
	clock *clocktest.Clock
}

func setupScheduler(t *testing.T, db *gorm.DB) *schedBundle {
	t.Helper()
	return &schedBundle{db: db, clock: clocktest.New(clocktest.T0)}
}

// insert writes RESERVED posts scheduled at the given offsets from
// clocktest.T0, in one batched insert.
func (b *schedBundle) insert(t *testing.T, offsets ...time.Duration) []reservation.Post {
	t.Helper()
	return b.insertAt(t, clocktest.T0, offsets...)
}

// insertAt writes RESERVED posts created at base and scheduled at the given
// offsets from it, in one batched insert.
func (b *schedBundle) insertAt(t *testing.T, base time.Time, offsets ...time.Duration) []reservation.Post {
	t.Helper()
	posts := make([]reservation.Post, len(offsets))
	for i, off := range offsets {
		posts[i] = reservation.Post{Title: "t", Content: "c", Status: reservation.StatusReserved,
			ScheduledAt: base.Add(off), CreatedAt: base, UpdatedAt: base,
			Version: optimisticlock.Version{Int64: 1, Valid: true}}
	}
	require.NoError(t, b.db.CreateInBatches(posts, 500).Error)
	return posts
}

// events returns the reservation events by post id.
func (b *schedBundle) events(t *testing.T) map[int64][]outbox.Message {
	t.Helper()
	var rows []outbox.Message
	require.NoError(t, b.db.Where("event_type = ?", event.ReservationEvent).Order("id").Find(&rows).Error)
	out := map[int64][]outbox.Message{}
	for _, r := range rows {
		out[r.AggregateID] = append(out[r.AggregateID], r)
	}
	return out
}

func (b *schedBundle) post(t *testing.T, id int64) reservation.Post {
	t.Helper()
	return loadPost(t, b.db, id)
}

// scheduler returns a scheduler of the bundle's database on its clock.
func (b *schedBundle) scheduler(t *testing.T) *reservation.Scheduler {
	t.Helper()
	s, err := reservation.NewScheduler(b.db, reservation.SchedulerConfig{Lead: 5 * time.Minute, BatchSize: 50,
		Now: b.clock.Now, Logger: quietLogger()})
	require.NoError(t, err)
	return s
}

// versionCheckedUpdate changes a post the way the service does: read it,
// then update it only if it still has the version and status read.
func (b *schedBundle) versionCheckedUpdate(ctx context.Context, id int64, changes map[string]any) (bool, error) {
	var p reservation.Post
	if err := b.db.WithContext(ctx).First(&p, id).Error; err != nil {
		return false, err
	}
	if p.Status != reservation.StatusReserved {
		return false, nil
	}
	changes["version"] = gorm.Expr("version + 1")
	var ok bool
	err := database.Transaction(ctx, b.db, func(tx *gorm.DB) error {
		res := tx.Model(&reservation.Post{}).Where("id = ? AND version = ? AND status = ?", id, p.Version.Int64, reservation.StatusReserved).
			UpdateColumns(changes)
		ok = res.RowsAffected == 1
		return res.Error
	})
	return ok, err
}

// offsetsOf returns the n offsets at(0) … at(n-1).
func offsetsOf(n int, at func(i int) time.Duration) []time.Duration {
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = at(i)
	}
	return offsets
}

// postsByStatus reads every post and counts them by status: each WORKING
// post has exactly one of events; a post of another status goes to the check
// of its status, and a status without a check fails the test.
func postsByStatus(t *testing.T, db *gorm.DB, events map[int64][]outbox.Message,
	others map[reservation.Status]func(reservation.Post)) (map[reservation.Status]int, []reservation.Post) {
	t.Helper()
	var all []reservation.Post
	require.NoError(t, db.Find(&all).Error)
	counts := map[reservation.Status]int{}
	for _, p := range all {
		counts[p.Status]++
		if p.Status == reservation.StatusWorking {
			require.Len(t, events[p.ID], 1, "post %d", p.ID)
			continue
		}
		check, ok := others[p.Status]
		if !ok {
			t.Fatalf("post %d is %s", p.ID, p.Status)
		}
		check(p)
	}
	return counts, all
}

func TestSchedulerMarksDuePostsOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		ctx := context.Background()
		posts := b.insert(t,
			3*time.Minute, // due within the lead
			5*time.Minute, // exactly at the lead
			-time.Hour,    // overdue: the service was down
			6*time.Minute, // outside the lead
			2*time.Minute, // due, but cancelled below
		)
		ok, err := b.versionCheckedUpdate(ctx, posts[4].ID, map[string]any{"status": reservation.StatusCancelled})
		require.NoError(t, err)
		require.True(t, ok)

		s := b.scheduler(t)
		res, err := s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 3}, res)

		events := b.events(t)
		require.Len(t, events, 3)
		for _, p := range posts[:3] {
			got := b.post(t, p.ID)
			require.Equal(t, reservation.StatusWorking, got.Status)
			require.EqualValues(t, 2, got.Version.Int64)
			require.True(t, got.UpdatedAt.Equal(clocktest.T0))
			require.Len(t, events[p.ID], 1)
			ev := events[p.ID][0]
			require.Equal(t, outbox.StatusPending, ev.Status)
			require.NotNil(t, ev.DedupKey)
			require.Equal(t, event.ReservationDedupKey(p.ID), *ev.DedupKey)
			var payload map[string]any
			require.NoError(t, json.Unmarshal([]byte(ev.Payload), &payload))
			require.Len(t, payload, 6)
			require.Equal(t, p.OwnerID, payload["ownerId"], "the post's owner, also when it is empty")
			require.Equal(t, ev.EventID, payload["eventId"])
			require.Equal(t, "POSTING_RESERVATION_EVENT", payload["eventType"])
			require.EqualValues(t, p.ID, payload["postId"])
			require.Equal(t, clocktest.T0.Format(time.RFC3339), payload["occurredAt"])
			require.Equal(t, p.ScheduledAt.UTC().Format(time.RFC3339), payload["scheduledAt"])
		}
		require.Equal(t, reservation.StatusReserved, b.post(t, posts[3].ID).Status)
		require.Equal(t, reservation.StatusCancelled, b.post(t, posts[4].ID).Status)
		require.Empty(t, events[posts[4].ID], "a cancelled post never gets a reservation event")

		// A second run finds nothing new; a minute later the outside one is due.
		res, err = s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{}, res)
		require.Len(t, b.events(t), 3)
		b.clock.Add(time.Minute)
		res, err = s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 1}, res)
		require.Len(t, b.events(t), 4)
		require.Equal(t, reservation.StatusWorking, b.post(t, posts[3].ID).Status)
		require.Equal(t, reservation.StatusCancelled, b.post(t, posts[4].ID).Status)
	})
}

// A run reads in batches and loops until no due post is left.
func TestSchedulerWorksOffMoreThanOneBatch(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		offsets := offsetsOf(130, func(i int) time.Duration { return -time.Duration(i) * time.Second }) // all overdue, several per second
		b.insert(t, offsets...)
		s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{BatchSize: 7, Now: func() time.Time { return clocktest.T0 }})
		require.NoError(t, err)
		res, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 130}, res)
		require.Len(t, b.events(t), 130)
	})
}

// A run's batch doubles after each batch that came back full, up to
// MaxBatchSize: 30 due posts at 2 growing to 8 are marked in batches of 2,
// 4, 8, 8 and 8, five UPDATEs of posts; at a fixed 2, in fifteen.
func TestSchedulerRunGrowsItsBatchWhileBatchesComeBackFull(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		for i, c := range []struct{ max, updates int }{{8, 5}, {2, 15}} {
			b := setupScheduler(t, db.DB)
			b.insert(t, offsetsOf(30, func(i int) time.Duration { return -time.Duration(i+1) * time.Second })...)
			s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{BatchSize: 2, MaxBatchSize: c.max,
				Now: func() time.Time { return clocktest.T0 }})
			require.NoError(t, err)
			var updates atomic.Int64
			count := db.DB.Session(&gorm.Session{NewDB: true})
			databasetest.Before(t, count, databasetest.StmtExec, func(tx *gorm.DB) {
				if markWorking(tx) {
					updates.Add(1)
				}
			})
			res, err := s.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, reservation.SchedulerResult{Marked: 30}, res)
			require.Len(t, b.events(t), 30*(i+1), "an event for each post marked")
			require.EqualValues(t, c.updates, updates.Load(), "UPDATEs of posts with a batch growing to %d", c.max)
		}
	})
}

// A post changed between the scheduler's read and its update is skipped
// without an event: the version check refuses the stale write.
func TestSchedulerSkipsAPostChangedAfterTheRead(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		posts := b.insert(t, time.Minute, 2*time.Minute)
		var bumped atomic.Bool
		databasetest.Before(t, db.DB, databasetest.StmtExec, func(tx *gorm.DB) {
			if !markWorking(tx) || !bumped.CompareAndSwap(false, true) {
				return
			}
			// A reschedule lands between the scheduler's read and its update.
			tx.AddError(tx.Session(&gorm.Session{NewDB: true}).Exec(
				"UPDATE posts SET version = version + 1, scheduled_at = ? WHERE id = ?", clocktest.T0.Add(4*time.Minute), posts[0].ID).Error)
		})
		s := b.scheduler(t)
		res, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, bumped.Load())
		require.Equal(t, reservation.SchedulerResult{Marked: 1, Skipped: 1}, res)
		got := b.post(t, posts[0].ID)
		require.Equal(t, reservation.StatusReserved, got.Status)
		require.EqualValues(t, 2, got.Version.Int64)
		events := b.events(t)
		require.Empty(t, events[posts[0].ID])
		require.Len(t, events[posts[1].ID], 1)

		// The next run reads the post again, at its new version, and marks it.
		res, err = s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 1}, res)
		require.Len(t, b.events(t)[posts[0].ID], 1)
	})
}

// markWorking is the scheduler's UPDATE of a post's status (one post or a
// batch).
func markWorking(tx *gorm.DB) bool { return reservation.MarkWorking(tx.Statement.SQL.String()) }

// An event already recorded for a post (the database-level guard) makes the
// scheduler skip that post, roll back its state change, and still mark the
// other posts of the batch.
func TestSchedulerDuplicateGuardSkipsOnlyThatPost(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		posts := b.insert(t, time.Minute, 2*time.Minute, 3*time.Minute)
		ev := reservationtest.Outbox(t, event.ReservationEvent, posts[1].ID, clocktest.T0, event.ReservationEventFields{ScheduledAt: posts[1].ScheduledAt})
		ev.DedupKey = event.ReservationDedupKey(posts[1].ID)
		_, err := outbox.Append(db.DB, ev)
		require.NoError(t, err)

		res, err := b.scheduler(t).RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, reservation.SchedulerResult{Marked: 2, Skipped: 1}, res)
		require.Equal(t, reservation.StatusReserved, b.post(t, posts[1].ID).Status, "its transaction was rolled back")
		require.Equal(t, reservation.StatusWorking, b.post(t, posts[0].ID).Status)
		require.Equal(t, reservation.StatusWorking, b.post(t, posts[2].ID).Status)
		events := b.events(t)
		require.Len(t, events, 3)
		for _, p := range posts {
			require.Len(t, events[p.ID], 1)
		}
	})
}

// Two schedulers, each with its own connection pool as in two processes, run
// concurrently against 1,000 due posts: exactly one event per post.
func TestSchedulersOnSeparatePoolsYieldExactlyOneEventPerPost(t *testing.T) {
	t.Parallel()
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			schedulersOnSeparatePools(t, databasetest.URL(t, d, "sched"))
		})
	}
	// Through PgBouncer in transaction pooling: the claim's statements of
	// one scheduler run on different server connections.
	t.Run("pgbouncer", func(t *testing.T) {
		t.Parallel()
		direct := databasetest.PostgresURL(t, "sched")
		schedulersOnSeparatePools(t, pgbouncertest.Start(t, direct, pgbouncertest.Transaction))
	})
}

func schedulersOnSeparatePools(t *testing.T, url string) {
	pools := databasetest.Pools(t, url, 2)

	offsets := offsetsOf(1000, func(i int) time.Duration { return time.Duration(i%600-300) * time.Second }) // overdue and due, many sharing a second
	setupScheduler(t, pools[0].DB).insert(t, offsets...)

	start := time.Now()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		total   reservation.SchedulerResult
		runErrs []error
	)
	for _, db := range pools {
		s := setupScheduler(t, db.DB).scheduler(t)
		for range 2 {
			wg.Go(func() {
				for range 3 {
					res, err := s.RunOnce(context.Background())
					mu.Lock()
					total.Marked += res.Marked
					total.Skipped += res.Skipped
					total.Failed += res.Failed
					runErrs = append(runErrs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	t.Logf("4 concurrent runners on 2 pools marked 1,000 posts in %s (skipped %d)", time.Since(start), total.Skipped)
	require.NoError(t, errors.Join(runErrs...))
	require.Equal(t, 1000, total.Marked)
	require.Zero(t, total.Failed)

	var events, working int64
	require.NoError(t, pools[0].DB.Model(&outbox.Message{}).Where("event_type = ?", event.ReservationEvent).Count(&events).Error)
	require.NoError(t, pools[0].DB.Model(&reservation.Post{}).Where("status = ?", reservation.StatusWorking).Count(&working).Error)
	require.EqualValues(t, 1000, events)
	require.EqualValues(t, 1000, working)
	var distinct int64
	require.NoError(t, pools[0].DB.Model(&outbox.Message{}).Distinct("aggregate_id").Count(&distinct).Error)
	require.EqualValues(t, 1000, distinct)
}

// Cancels and reschedules racing with the scheduler end in one consistent
// state per post: CANCELLED or rescheduled with no reservation event, or
// WORKING with exactly one.
func TestSchedulerRacingCancelAndRescheduleEndsConsistent(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		offsets := offsetsOf(300, func(i int) time.Duration { return time.Duration(i) * time.Second / 2 })
		posts := b.insert(t, offsets...)
		later := clocktest.T0.Add(time.Hour)
		s := b.scheduler(t)

		var (
			wg                sync.WaitGroup
			runErr, changeErr error
			changed           atomic.Int64
		)
		wg.Go(func() {
			for range 2 {
				if _, err := s.RunOnce(context.Background()); err != nil {
					runErr = err
					return
				}
			}
		})
		wg.Go(func() {
			// From the latest post back, to meet the scheduler, which
			// goes oldest first, somewhere in the middle.
			for i := len(posts) - 1; i >= 0; i-- {
				p := posts[i]
				changes := map[string]any{"status": reservation.StatusCancelled, "updated_at": clocktest.T0}
				if i%2 == 1 {
					changes = map[string]any{"scheduled_at": later, "updated_at": clocktest.T0}
				}
				ok, err := b.versionCheckedUpdate(context.Background(), p.ID, changes)
				if err != nil {
					changeErr = err
					return
				}
				if ok {
					changed.Add(1)
				}
			}
		})
		wg.Wait()
		require.NoError(t, runErr)
		require.NoError(t, changeErr)

		events := b.events(t)
		counts, _ := postsByStatus(t, db.DB, events, map[reservation.Status]func(reservation.Post){
			reservation.StatusCancelled: func(p reservation.Post) {
				require.Empty(t, events[p.ID], "post %d", p.ID)
			},
			reservation.StatusReserved: func(p reservation.Post) {
				require.True(t, p.ScheduledAt.Equal(later), "post %d left RESERVED but due", p.ID)
				require.Empty(t, events[p.ID], "post %d", p.ID)
			},
		})
		require.EqualValues(t, changed.Load(), counts[reservation.StatusCancelled]+counts[reservation.StatusReserved])
		require.Len(t, events, counts[reservation.StatusWorking])
		t.Logf("%v", counts)
	})
}

func TestSchedulerStartStop(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	b := setupScheduler(t, db.DB)
	posts := b.insert(t, time.Minute)

	idle, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{})
	require.NoError(t, err)
	idle.Stop() // without Start: safe
	idle.Stop()
	require.Error(t, idle.Start(context.Background()), "a stopped scheduler does not start")

	var runs atomic.Int64
	s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Spec: "@every 1s", Logger: quietLogger(),
		Now: func() time.Time { return clocktest.T0 },
		Observe: func(res reservation.SchedulerResult, _ time.Duration, err error) {
			if err == nil {
				runs.Add(1)
			}
		}})
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	require.Error(t, s.Start(context.Background()), "started twice")
	require.Eventually(t, func() bool {
		return b.post(t, posts[0].ID).Status == reservation.StatusWorking
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return runs.Load() >= 1 }, 10*time.Second, 20*time.Millisecond)
	s.Stop()
	s.Stop()
	require.Len(t, b.events(t)[posts[0].ID], 1)
}

// Ending Start's context stops the scheduler as Stop does.
func TestSchedulerStopsWithItsContext(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Spec: "@every 1s", Logger: quietLogger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	cancel()
	done := make(chan struct{})
	go func() { s.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return after the context ended")
	}
}

func TestSchedulerConfig(t *testing.T) {
	t.Parallel()
	s, err := reservation.NewScheduler(nil, reservation.SchedulerConfig{})
	require.NoError(t, err)
	cfg := s.Config()
	require.Equal(t, "@every 1m", cfg.Spec)
	require.Equal(t, 5*time.Minute, cfg.Lead)
	require.Equal(t, 100, cfg.BatchSize)
	require.Equal(t, 1000, cfg.MaxBatchSize)

	for _, c := range []reservation.SchedulerConfig{
		{BatchSize: 100, MaxBatchSize: 50},
		{MaxBatchSize: 1001},
		{Spec: "every minute"},
		{Spec: "* * *"},
		{Lead: -time.Second},
		{BatchSize: 1001},
		{BatchSize: -1},
		{BatchSize: 100, MaxPerRun: 10},
	} {
		_, err := reservation.NewScheduler(nil, c)
		require.ErrorContains(t, err, "invalid scheduler config", "%+v", c)
	}
}

// A post whose update fails for another reason is counted as failed and
// reported, and does not keep the rest of its batch from being marked.
func TestSchedulerBadRowDoesNotBlockTheRest(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		posts := b.insert(t, time.Minute, 2*time.Minute, 3*time.Minute)
		bad := posts[1].ID
		databasetest.Fail(t, db.DB, databasetest.StmtExec, errors.New("sched test: bad row"), func(tx *gorm.DB) bool {
			// The batch's UPDATE holds the bad post among its (id,
			// version) pairs; the per-post UPDATE has its id third.
			return markWorking(tx) &&
				(strings.Contains(tx.Statement.SQL.String(), "(id, version) IN") && reservation.VarsHold(tx.Statement.Vars[3:], bad) ||
					len(tx.Statement.Vars) > 2 && tx.Statement.Vars[2] == bad)
		})
		s := b.scheduler(t)
		res, err := s.RunOnce(context.Background())
		require.ErrorContains(t, err, "sched test: bad row")
		require.Equal(t, reservation.SchedulerResult{Marked: 2, Failed: 1}, res)
		require.Equal(t, reservation.StatusReserved, b.post(t, bad).Status)
		events := b.events(t)
		require.Len(t, events, 2)
		require.Empty(t, events[bad])
	})
}

// A status changed between the read and the mark by a writer that did not
// bump the version (an operator's SQL, a tool) is not overwritten: the mark's
// UPDATE checks the status as well as the version.
func TestSchedulerMarkChecksTheStatusAsWellAsTheVersion(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		posts := b.insert(t, time.Minute)
		id := posts[0].ID
		var done atomic.Bool
		databasetest.After(t, db.DB, databasetest.StmtQuery, func(tx *gorm.DB) {
			if tx.Statement.Table == "posts" && done.CompareAndSwap(false, true) {
				require.NoError(t, tx.Session(&gorm.Session{NewDB: true}).
					Exec("UPDATE posts SET status = ? WHERE id = ?", reservation.StatusCancelled, id).Error)
			}
		})
		res, err := b.scheduler(t).RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, done.Load())
		require.Equal(t, reservation.SchedulerResult{Skipped: 1}, res)
		require.Equal(t, reservation.StatusCancelled, b.post(t, id).Status)
		require.Empty(t, b.events(t)[id])
	})
}

// Without a clock of its own the scheduler asks the database what time it
// is: a post due within the lead by the database's clock is marked, a later
// one is not.
func TestSchedulerDefaultsToTheDatabaseClock(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		dbNow := databasetest.Now(t, db.DB)
		posts := b.insertAt(t, dbNow, 4*time.Minute, 10*time.Minute)
		soon, later := posts[0], posts[1]
		s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Lead: 5 * time.Minute, Logger: quietLogger()})
		require.NoError(t, err)
		res, err := s.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Marked)
		require.Equal(t, reservation.StatusWorking, b.post(t, soon.ID).Status)
		require.Equal(t, reservation.StatusReserved, b.post(t, later.ID).Status)
		ev := b.events(t)[soon.ID]
		require.Len(t, ev, 1)
		require.WithinDuration(t, dbNow, ev[0].Created, time.Minute, "the event's time is the database's")
	})
}

// Stop interrupts a running job, waits until it has returned, and no run
// starts after it.
func TestSchedulerStopWaitsForTheRunningJob(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setupScheduler(t, db.DB)
		b.insert(t, time.Minute)
		entered := make(chan struct{})
		var slowed atomic.Bool
		databasetest.Before(t, db.DB, databasetest.StmtQuery, func(tx *gorm.DB) {
			if tx.Statement.Table != "posts" || !slowed.CompareAndSwap(false, true) {
				return
			}
			close(entered)
			<-tx.Statement.Context.Done() // the job's first read lasts until the run is interrupted
		})
		var ended atomic.Int64
		s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Spec: "@every 1s", Logger: quietLogger(),
			Now:     func() time.Time { return clocktest.T0 },
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
		require.Equal(t, reservation.StatusReserved, b.post(t, 1).Status, "the interrupted run marked nothing")
	})
}

// Two schedulers, each on its own connection pool as in two processes, and a
// canceller race over 600 due posts on every database: every post ends
// WORKING with exactly one reservation event, or CANCELLED with at most one
// (cancelled before or after it was marked); the schedulers' Marked counts
// add up to the events written.
func TestSetBasedSchedulersAndCancellerYieldOneEventPerPost(t *testing.T) {
	t.Parallel()
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			url := databasetest.URL(t, d, "schedrace")
			pools := databasetest.Pools(t, url, 2)
			const n = 600
			offsets := offsetsOf(n, func(i int) time.Duration { return time.Duration(i%120-60) * time.Second }) // many sharing a second
			posts := setupScheduler(t, pools[0].DB).insert(t, offsets...)
			svc, err := reservation.NewService(pools[1].DB, reservation.ServiceConfig{})
			require.NoError(t, err)

			var (
				wg        sync.WaitGroup
				mu        sync.Mutex
				marked    int
				errs      []error
				cancelled atomic.Int64
			)
			for _, db := range pools {
				s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Lead: 5 * time.Minute, BatchSize: 40,
					Now: func() time.Time { return clocktest.T0 }, Logger: quietLogger()})
				require.NoError(t, err)
				wg.Go(func() {
					for range 3 {
						res, err := s.RunOnce(context.Background())
						mu.Lock()
						marked += res.Marked
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
			wg.Go(func() {
				for i := len(posts) - 1; i >= 0; i -= 3 { // from the latest back, to meet the schedulers
					for {
						_, err := svc.Cancel(context.Background(), posts[i].ID)
						if errors.Is(err, reservation.ErrConflict) {
							continue // changed meanwhile (marked WORKING): cancel again
						}
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						if err == nil {
							cancelled.Add(1)
						}
						break
					}
				}
			})
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			require.EqualValues(t, n/3, cancelled.Load())

			b := setupScheduler(t, pools[0].DB)
			events := b.events(t)
			counts, all := postsByStatus(t, pools[0].DB, events, map[reservation.Status]func(reservation.Post){
				reservation.StatusCancelled: func(p reservation.Post) {
					require.LessOrEqual(t, len(events[p.ID]), 1, "post %d", p.ID)
				},
			})
			require.Len(t, all, n)
			require.Equal(t, n/3, counts[reservation.StatusCancelled])
			total := 0
			for _, evs := range events {
				total += len(evs)
			}
			require.Equal(t, marked, total, "every mark wrote one event, and every event comes from a mark")
			t.Logf("%v, %d marked", counts, marked)
		})
	}
}
