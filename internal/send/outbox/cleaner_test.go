package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// day is the unit of the retention tests.
const day = 24 * time.Hour

// retentionRows writes 7 SENT rows sent long ago (base + 1 minute) and
// rows the cleaner must keep with a cutoff of base + 1 day: recent SENT rows
// (one created long ago) and every other status, old ones with a sent_at
// that would qualify.
func (o *bundle) retentionRows(t *testing.T, base time.Time) (old []int64, keep []int64) {
	t.Helper()
	rows := o.append(t, base, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)
	longAgo := base.Add(time.Minute)
	for _, m := range rows[:7] {
		o.set(t, m.ID, outbox.StatusSent, &longAgo)
		old = append(old, m.ID)
	}
	recent := base.Add(2 * day)
	o.set(t, rows[7].ID, outbox.StatusSent, &recent) // created long ago, sent recently
	fresh := o.append(t, base.Add(7*day), 14)[0]
	sentFresh := base.Add(7 * day)
	o.set(t, fresh.ID, outbox.StatusSent, &sentFresh)
	o.set(t, rows[8].ID, outbox.StatusRetry, &longAgo)
	o.set(t, rows[9].ID, outbox.StatusProcessing, &longAgo)
	o.set(t, rows[10].ID, outbox.StatusFail, &longAgo)
	o.set(t, rows[11].ID, outbox.StatusFail, &longAgo)
	require.NoError(t, outbox.Discard(context.Background(), o.db.DB, []int64{rows[11].ID}, base)[0].Err)
	// rows[12] stays PENDING.
	keep = []int64{rows[7].ID, rows[8].ID, rows[9].ID, rows[10].ID, rows[11].ID, rows[12].ID, fresh.ID}
	return old, keep
}

// sentStep is the cleaner's one step in these tests: the outbox's own.
var sentStep = outbox.PurgeStep{Name: "outbox", Purge: outbox.Purge}

// The cleaner deletes only SENT rows sent before the database's now -
// retention, in statements of at most BatchSize rows, whatever this
// instance's own clock says.
func TestCleanerDeletesOnlyOldSentInBatches(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		before := databasetest.Now(t, o.db.DB)
		base := before.Add(-8 * day) // cutoff about base + 1 day
		_, keep := o.retentionRows(t, base)
		deletes := databasetest.Deletes(t, o.db.DB)
		// This instance's clock runs 30 days ahead: by it, every SENT row
		// would be old.
		skewed := func() time.Time { return time.Now().Add(30 * day) }
		c, err := outbox.NewCleaner(o.db.DB, outbox.CleanerConfig{
			Retention: 7 * day, BatchSize: 3, Pause: -1, Now: skewed,
		}, sentStep)
		require.NoError(t, err)

		res, err := c.RunOnce(ctx)
		require.NoError(t, err)
		after := databasetest.Now(t, o.db.DB)
		require.Equal(t, 7, res.Deleted["outbox"])
		require.False(t, res.Cutoff.Before(before.Add(-7*day)), "cutoff %s", res.Cutoff)
		require.False(t, res.Cutoff.After(after.Add(-7*day)), "cutoff %s", res.Cutoff)
		require.Equal(t, []int64{3, 3, 1}, databasetest.DeletedRows(deletes()))
		require.Equal(t, keep, o.remaining(t))

		// Nothing left to delete: no DELETE statement at all.
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Deleted["outbox"])
		require.Len(t, deletes(), 3)
	})
}

// A batch size that divides the backlog exactly ends with an empty read.
func TestPurgeExactBatches(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		old, keep := o.retentionRows(t, t0)
		deletes := databasetest.Deletes(t, o.db.DB)
		n, err := outbox.Purge(ctx, o.db.DB, t0.Add(day), 7, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, len(old), n)
		require.Equal(t, []int64{7}, databasetest.DeletedRows(deletes()))
		require.Equal(t, keep, o.remaining(t))

		_, err = outbox.Purge(ctx, o.db.DB, t0, 0, 0)
		require.Error(t, err)
		_, err = outbox.Purge(ctx, o.db.DB, t0, outbox.MaxPurgeBatchSize+1, 0)
		require.Error(t, err)
	})
}

// Two purges at once delete every old row exactly once between them.
func TestConcurrentPurges(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		aggregates := make([]int64, 120)
		for i := range aggregates {
			aggregates[i] = int64(i + 1)
		}
		rows := o.append(t, t0, aggregates...)
		sent := t0.Add(time.Minute)
		require.NoError(t, o.db.Model(&outbox.Message{}).Where("id IN ?", ids(rows)).
			Updates(map[string]any{"status": outbox.StatusSent, "sent_at": sent}).Error)

		var wg sync.WaitGroup
		deleted := make([]int, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() { deleted[i], errs[i] = outbox.Purge(ctx, o.db.DB, t0.Add(day), 10, 0) })
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.Equal(t, len(rows), deleted[0]+deleted[1])
		require.Empty(t, o.remaining(t))
	})
}

func TestCleanerLoop(t *testing.T) {
	t.Parallel()
	o := setup(t, databasetest.NewSQLite(t))
	old, keep := o.retentionRows(t, databasetest.Now(t, o.db.DB).Add(-8*day))
	require.Len(t, old, 7)
	c, err := outbox.NewCleaner(o.db.DB, outbox.CleanerConfig{
		Retention: 7 * day, Interval: time.Hour, Pause: -1,
	}, sentStep)
	require.NoError(t, err)
	c.Stop() // safe before Start, and keeps it from starting
	require.Error(t, c.Start(context.Background()))

	c, err = outbox.NewCleaner(o.db.DB, outbox.CleanerConfig{
		Retention: 7 * day, Interval: time.Hour, Pause: -1,
	}, sentStep)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	require.Error(t, c.Start(context.Background()))
	// The first run starts at once.
	require.Eventually(t, func() bool {
		var n int64
		return o.db.Model(&outbox.Message{}).Count(&n).Error == nil && n == int64(len(keep))
	}, 10*time.Second, 10*time.Millisecond)
	c.Stop()
	c.Stop()
	require.Equal(t, keep, o.remaining(t))
}

func TestCleanerConfig(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{}, sentStep)
	require.NoError(t, err)
	cfg := c.Config()
	require.Equal(t, 7*day, cfg.Retention)
	require.Equal(t, time.Hour, cfg.Interval)
	require.Equal(t, 500, cfg.BatchSize)
	require.Equal(t, 100*time.Millisecond, cfg.Pause)

	for _, bad := range []outbox.CleanerConfig{
		{BatchSize: outbox.MaxPurgeBatchSize + 1},
		{BatchSize: -1},
		{Retention: time.Millisecond},
		{Interval: time.Millisecond},
		{Pause: 2 * time.Minute},
	} {
		_, err := outbox.NewCleaner(db.DB, bad, sentStep)
		require.ErrorContains(t, err, "invalid cleaner config", "%+v", bad)
	}
}

// A step with a Retention of its own gets its cutoff from it, the others
// from the cleaner's, both from one reading of the database's clock; a step
// retention below 1s is refused.
func TestCleanerStepRetentionReplacesTheCleanersOwn(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	cutoffs := map[string]time.Time{}
	record := func(name string) outbox.PurgeFunc {
		return func(_ context.Context, _ *gorm.DB, olderThan time.Time, _ int, _ time.Duration) (int, error) {
			cutoffs[name] = olderThan
			return 0, nil
		}
	}
	c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{},
		outbox.PurgeStep{Name: "week", Purge: record("week")},
		outbox.PurgeStep{Name: "hour", Purge: record("hour"), Retention: time.Hour})
	require.NoError(t, err)
	res, err := c.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, res.Cutoff, cutoffs["week"])
	require.Equal(t, 7*day-time.Hour, cutoffs["hour"].Sub(cutoffs["week"]))

	_, err = outbox.NewCleaner(db.DB, outbox.CleanerConfig{},
		outbox.PurgeStep{Name: "bad", Purge: record("bad"), Retention: time.Millisecond})
	require.ErrorContains(t, err, "retention 1ms below 1s")
}
