package reservation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A post's deadline: the client's publishBy, else scheduledAt plus the
// service's late limit, else none; one before scheduledAt is refused and
// writes nothing.
func TestCreateStoresTheDeadlineOrTheLateLimit(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		clock := clocktest.New(svcStart)
		at := svcStart.Add(time.Hour)
		by := at.Add(10 * time.Minute)

		plain, err := reservation.NewService(db.DB, reservation.ServiceConfig{Now: clock.Now})
		require.NoError(t, err)
		p, err := plain.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at})
		require.NoError(t, err)
		require.Nil(t, loadPost(t, db.DB, p.ID).PublishBy, "no limit: no deadline")
		require.Nil(t, reservation.NewPostJSON(p).PublishBy)

		limited, err := reservation.NewService(db.DB, reservation.ServiceConfig{Now: clock.Now, LateLimit: 2 * time.Hour})
		require.NoError(t, err)
		p, err = limited.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at})
		require.NoError(t, err)
		stored := loadPost(t, db.DB, p.ID)
		require.NotNil(t, stored.PublishBy)
		require.True(t, stored.PublishBy.Equal(database.Normalize(at.Add(2*time.Hour))), "scheduledAt plus the late limit")

		p, err = limited.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at, PublishBy: &by})
		require.NoError(t, err)
		require.True(t, loadPost(t, db.DB, p.ID).PublishBy.Equal(database.Normalize(by)), "the post's own deadline wins")
		require.Equal(t, reservation.FormatJSONTime(database.Normalize(by)), *reservation.NewPostJSON(p).PublishBy)

		var before int64
		require.NoError(t, db.Model(&reservation.Post{}).Count(&before).Error)
		early := at.Add(-time.Second)
		_, err = limited.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at, PublishBy: &early})
		requireInvalid(t, err, "publishBy")
		var after int64
		require.NoError(t, db.Model(&reservation.Post{}).Count(&after).Error)
		require.Equal(t, before, after, "nothing written")
	})
}

// A reschedule moves the deadline with it; a new publishBy replaces it and
// must not lie before the post's (new) scheduledAt.
func TestUpdateMovesTheDeadlineWithTheSchedule(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		at := svcStart.Add(time.Hour)
		by := at.Add(30 * time.Minute)
		p, err := e.svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at, PublishBy: &by})
		require.NoError(t, err)

		later := at.Add(2 * time.Hour)
		got, err := e.svc.Update(ctx, p.ID, reservation.UpdateInput{ScheduledAt: &later})
		require.NoError(t, err)
		want := database.Normalize(by.Add(2 * time.Hour))
		require.True(t, got.PublishBy.Equal(want))
		require.True(t, e.load(t, p.ID).PublishBy.Equal(want))

		newBy := later.Add(5 * time.Minute)
		got, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{PublishBy: &newBy})
		require.NoError(t, err)
		require.True(t, e.load(t, p.ID).PublishBy.Equal(database.Normalize(newBy)))
		require.Equal(t, int64(3), got.Version.Int64)

		tooEarly := later.Add(-time.Minute)
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{PublishBy: &tooEarly})
		requireInvalid(t, err, "publishBy")
		evenLater := newBy.Add(time.Hour)
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{ScheduledAt: &evenLater, PublishBy: &newBy})
		requireInvalid(t, err, "publishBy")
		require.True(t, e.load(t, p.ID).PublishBy.Equal(database.Normalize(newBy)), "a refused change writes nothing")
	})
}

// The same Idempotency-Key with another publishBy is another request.
func TestIdempotencyKeyCoversPublishBy(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		at := svcStart.Add(time.Hour)
		by := at.Add(time.Minute)
		in := reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at, PublishBy: &by}
		first, err := e.svc.CreateOnce(ctx, "key-1", in)
		require.NoError(t, err)
		again, err := e.svc.CreateOnce(ctx, "key-1", in)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, first.Post.ID, again.Post.ID)
		require.True(t, again.Post.PublishBy.Equal(database.Normalize(by)), "the replay shows the deadline")
		other := at.Add(2 * time.Minute)
		in.PublishBy = &other
		_, err = e.svc.CreateOnce(ctx, "key-1", in)
		require.ErrorIs(t, err, reservation.ErrIdempotencyKeyReused)
	})
}

// The scheduler leaves a RESERVED post past its deadline alone: it is the
// expirer's, and must never become WORKING (and so never be published).
func TestSchedulerLeavesPostsPastTheirDeadline(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		clock := clocktest.New(svcStart)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{Now: clock.Now})
		require.NoError(t, err)
		at := svcStart.Add(time.Minute)
		by := at.Add(time.Minute)
		late, err := svc.Create(ctx, reservation.CreateInput{Title: "late", Content: "c", ScheduledAt: at, PublishBy: &by})
		require.NoError(t, err)
		inTime, err := svc.Create(ctx, reservation.CreateInput{Title: "in time", Content: "c", ScheduledAt: at})
		require.NoError(t, err)
		cfg := reservation.DefaultSchedulerConfig()
		cfg.Now = func() time.Time { return by.Add(time.Second) }
		sched, err := reservation.NewScheduler(db.DB, cfg)
		require.NoError(t, err)
		res, err := sched.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Marked)
		require.Equal(t, reservation.StatusReserved, loadPost(t, db.DB, late.ID).Status)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, inTime.ID).Status)
	})
}

// A deadline that a reschedule would move past the year 9999 (publishBy at
// the very end of the years the databases store) is refused as publishBy:
// stored, it failed the write on MariaDB and PostgreSQL, and SQLite kept a
// text that sorts before every real time, so the post expired at once.
func TestRescheduleRefusesADeadlineMovedPastTheYear9999(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		at := svcStart.Add(time.Hour)
		by := time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC)
		p, err := e.svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: at, PublishBy: &by})
		require.NoError(t, err)
		later := at.Add(2 * time.Hour)
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{ScheduledAt: &later})
		requireInvalid(t, err, "publishBy")
		stored := e.load(t, p.ID)
		require.True(t, stored.PublishBy.Equal(database.Normalize(by)), "a refused change writes nothing")
		require.True(t, stored.ScheduledAt.Equal(database.Normalize(at)))

		// Moved together with a publishBy of its own, the reschedule goes.
		newBy := later.Add(time.Hour)
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{ScheduledAt: &later, PublishBy: &newBy})
		require.NoError(t, err)
	})
}
