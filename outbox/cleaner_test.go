package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
)

const opsDay = 24 * time.Hour

// opsDeletes records the rows each DELETE statement on db removed.
type opsDeletes struct {
	mu   sync.Mutex
	rows []int64
}

func opsCountDeletes(t *testing.T, db *gorm.DB) *opsDeletes {
	t.Helper()
	d := &opsDeletes{}
	require.NoError(t, db.Callback().Delete().After("gorm:delete").Register("ops:count_deletes", func(tx *gorm.DB) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.rows = append(d.rows, tx.Statement.RowsAffected)
	}))
	return d
}

func (d *opsDeletes) statements() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int64{}, d.rows...)
}

// opsRetentionRows writes 7 SENT rows sent long ago (base + 1 minute) and
// rows the cleaner must keep with a cutoff of base + 1 day: recent SENT rows
// (one created long ago) and every other status, old ones with a sent_at
// that would qualify.
func opsRetentionRows(t *testing.T, db *gorm.DB, base time.Time) (old []int64, keep []int64) {
	t.Helper()
	rows := appendEvents(t, db, base, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)
	longAgo := base.Add(time.Minute)
	for _, m := range rows[:7] {
		opsSet(t, db, m.ID, outbox.StatusSent, &longAgo)
		old = append(old, m.ID)
	}
	recent := base.Add(2 * opsDay)
	opsSet(t, db, rows[7].ID, outbox.StatusSent, &recent) // created long ago, sent recently
	fresh := appendEvents(t, db, base.Add(7*opsDay), 14)[0]
	sentFresh := base.Add(7 * opsDay)
	opsSet(t, db, fresh.ID, outbox.StatusSent, &sentFresh)
	opsSet(t, db, rows[8].ID, outbox.StatusRetry, &longAgo)
	opsSet(t, db, rows[9].ID, outbox.StatusProcessing, &longAgo)
	opsSet(t, db, rows[10].ID, outbox.StatusFail, &longAgo)
	opsSet(t, db, rows[11].ID, outbox.StatusFail, &longAgo)
	require.NoError(t, outbox.Discard(context.Background(), db, []int64{rows[11].ID}, base)[0].Err)
	// rows[12] stays PENDING.
	keep = []int64{rows[7].ID, rows[8].ID, rows[9].ID, rows[10].ID, rows[11].ID, rows[12].ID, fresh.ID}
	return old, keep
}

func opsRemaining(t *testing.T, db *gorm.DB) []int64 {
	t.Helper()
	var got []int64
	require.NoError(t, db.Model(&outbox.Message{}).Order("id").Pluck("id", &got).Error)
	return got
}

// dbNow reads the database's clock.
func dbNow(t *testing.T, db *gorm.DB) time.Time {
	t.Helper()
	now, err := database.Now(context.Background(), db)
	require.NoError(t, err)
	return now
}

// The cleaner deletes only SENT rows sent before the database's now -
// retention, in statements of at most BatchSize rows, whatever this
// instance's own clock says.
func TestOpsCleanerDeletesOnlyOldSentInBatches(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		before := dbNow(t, db.DB)
		base := before.Add(-8 * opsDay) // cutoff about base + 1 day
		_, keep := opsRetentionRows(t, db.DB, base)
		deletes := opsCountDeletes(t, db.DB)
		// This instance's clock runs 30 days ahead: by it, every SENT row
		// would be old.
		skewed := func() time.Time { return time.Now().Add(30 * opsDay) }
		c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{
			Retention: 7 * opsDay, BatchSize: 3, Pause: -1, Now: skewed,
		})
		require.NoError(t, err)

		res, err := c.RunOnce(ctx)
		require.NoError(t, err)
		after := dbNow(t, db.DB)
		require.Equal(t, 7, res.Deleted)
		require.False(t, res.Cutoff.Before(before.Add(-7*opsDay)), "cutoff %s", res.Cutoff)
		require.False(t, res.Cutoff.After(after.Add(-7*opsDay)), "cutoff %s", res.Cutoff)
		require.Equal(t, []int64{3, 3, 1}, deletes.statements())
		require.Equal(t, keep, opsRemaining(t, db.DB))

		// Nothing left to delete: no DELETE statement at all.
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Deleted)
		require.Len(t, deletes.statements(), 3)
	})
}

// A batch size that divides the backlog exactly ends with an empty read.
func TestOpsPurgeExactBatches(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		old, keep := opsRetentionRows(t, db.DB, t0)
		deletes := opsCountDeletes(t, db.DB)
		n, err := outbox.Purge(ctx, db.DB, t0.Add(opsDay), 7, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, len(old), n)
		require.Equal(t, []int64{7}, deletes.statements())
		require.Equal(t, keep, opsRemaining(t, db.DB))

		_, err = outbox.Purge(ctx, db.DB, t0, 0, 0)
		require.Error(t, err)
		_, err = outbox.Purge(ctx, db.DB, t0, outbox.MaxPurgeBatchSize+1, 0)
		require.Error(t, err)
	})
}

// Two purges at once delete every old row exactly once between them.
func TestOpsConcurrentPurges(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		posts := make([]int64, 120)
		for i := range posts {
			posts[i] = int64(i + 1)
		}
		rows := appendEvents(t, db.DB, t0, posts...)
		sent := t0.Add(time.Minute)
		require.NoError(t, db.Model(&outbox.Message{}).Where("id IN ?", ids(rows)).
			Updates(map[string]any{"status": outbox.StatusSent, "sent_at": sent}).Error)

		var wg sync.WaitGroup
		deleted := make([]int, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() { deleted[i], errs[i] = outbox.Purge(ctx, db.DB, t0.Add(opsDay), 10, 0) })
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.Equal(t, len(rows), deleted[0]+deleted[1])
		require.Empty(t, opsRemaining(t, db.DB))
	})
}

func TestOpsCleanerLoop(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	old, keep := opsRetentionRows(t, db.DB, dbNow(t, db.DB).Add(-8*opsDay))
	require.Len(t, old, 7)
	c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{
		Retention: 7 * opsDay, Interval: time.Hour, Pause: -1,
	})
	require.NoError(t, err)
	c.Stop() // safe before Start, and keeps it from starting
	require.Error(t, c.Start(context.Background()))

	c, err = outbox.NewCleaner(db.DB, outbox.CleanerConfig{
		Retention: 7 * opsDay, Interval: time.Hour, Pause: -1,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	require.Error(t, c.Start(context.Background()))
	// The first run starts at once.
	require.Eventually(t, func() bool {
		var n int64
		return db.Model(&outbox.Message{}).Count(&n).Error == nil && n == int64(len(keep))
	}, 10*time.Second, 10*time.Millisecond)
	c.Stop()
	c.Stop()
	require.Equal(t, keep, opsRemaining(t, db.DB))
}

func TestOpsCleanerConfig(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{})
	require.NoError(t, err)
	cfg := c.Config()
	require.Equal(t, 7*opsDay, cfg.Retention)
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
		_, err := outbox.NewCleaner(db.DB, bad)
		require.ErrorContains(t, err, "invalid cleaner config", "%+v", bad)
	}
}

// opsDelete is one DELETE statement: its table and the rows it removed.
type opsDelete struct {
	table string
	rows  int64
}

// opsCountTableDeletes records every DELETE statement on db with its table.
func opsCountTableDeletes(t *testing.T, db *gorm.DB) func() []opsDelete {
	t.Helper()
	var mu sync.Mutex
	var got []opsDelete
	require.NoError(t, db.Callback().Delete().After("gorm:delete").Register("ops:count_table_deletes", func(tx *gorm.DB) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, opsDelete{tx.Statement.Table, tx.Statement.RowsAffected})
	}))
	return func() []opsDelete {
		mu.Lock()
		defer mu.Unlock()
		return append([]opsDelete{}, got...)
	}
}

func opsInbox(t *testing.T, db *gorm.DB, consumer string, n int, at time.Time) {
	t.Helper()
	require.NoError(t, db.Exec("INSERT INTO inbox (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?)",
		consumer, fmt.Sprintf("00000000-0000-7000-8000-%012d", n), "POSTING_EVENT", at).Error)
}

func opsPublication(t *testing.T, db *gorm.DB, postID int64, status string, updated time.Time) {
	t.Helper()
	require.NoError(t, db.Exec("INSERT INTO publications (post_id, event_id, partition_id, scheduled_at, status, created_at, updated_at) "+
		"VALUES (?, ?, 0, ?, ?, ?, ?)", postID, fmt.Sprintf("00000000-0000-7000-9000-%012d", postID),
		updated, status, updated.Add(-time.Minute), updated).Error)
}

// The cleaner also deletes inbox rows processed and PUBLISHED or CANCELLED
// publications settled before the database's now - retention, in
// transactions of at most BatchSize rows; young rows and PENDING or FAILED
// publications stay. The instance's own clock, far ahead, changes nothing.
func TestOpsCleanerDeletesOldInboxAndSettledPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		now := dbNow(t, db.DB)
		old, young := now.Add(-8*opsDay), now.Add(-6*opsDay)
		// Primary-key order: alpha's rows, then beta's; the second batch
		// spans both consumers.
		for n := 1; n <= 3; n++ {
			opsInbox(t, db.DB, "alpha", n, old.Add(time.Duration(n)*time.Second))
		}
		opsInbox(t, db.DB, "alpha", 4, young)
		for n := 5; n <= 8; n++ {
			opsInbox(t, db.DB, "beta", n, old)
		}
		opsInbox(t, db.DB, "beta", 9, young)
		for id, st := range map[int64]string{1: "PUBLISHED", 2: "CANCELLED", 3: "PUBLISHED", 4: "PENDING", 5: "FAILED", 6: "CANCELLED", 7: "PUBLISHED"} {
			opsPublication(t, db.DB, id, st, old)
		}
		opsPublication(t, db.DB, 8, "PUBLISHED", young)
		opsPublication(t, db.DB, 9, "CANCELLED", young)
		opsPublication(t, db.DB, 10, "PENDING", young)
		deletes := opsCountTableDeletes(t, db.DB)

		c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{
			Retention: 7 * opsDay, BatchSize: 2, Pause: -1,
			Now: func() time.Time { return time.Now().Add(30 * opsDay) },
		})
		require.NoError(t, err)
		res, err := c.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Deleted)
		require.Equal(t, 7, res.Inbox)
		require.Equal(t, 5, res.Publications)
		require.Equal(t, []opsDelete{
			{"inbox", 2}, {"inbox", 1}, {"inbox", 1}, {"inbox", 2}, {"inbox", 1},
			{"publications", 2}, {"publications", 2}, {"publications", 1},
		}, deletes())

		type inboxKey struct{ Consumer, EventID string }
		var inbox []inboxKey
		require.NoError(t, db.Raw("SELECT consumer, event_id FROM inbox ORDER BY consumer, event_id").Scan(&inbox).Error)
		require.Equal(t, []inboxKey{
			{"alpha", "00000000-0000-7000-8000-000000000004"},
			{"beta", "00000000-0000-7000-8000-000000000009"},
		}, inbox)
		var pubs []int64
		require.NoError(t, db.Raw("SELECT post_id FROM publications ORDER BY post_id").Scan(&pubs).Error)
		require.Equal(t, []int64{4, 5, 8, 9, 10}, pubs)

		// Nothing left: no DELETE at all.
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.CleanResult{Cutoff: res.Cutoff}, res)
		require.Len(t, deletes(), 8)
	})
}

// PurgeInbox and PurgePublications refuse a batch size out of bounds and
// delete by the cutoff they are given.
func TestOpsPurgeInboxAndPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		for n := 1; n <= 4; n++ {
			opsInbox(t, db.DB, "w", n, t0.Add(time.Duration(n)*time.Hour))
			opsPublication(t, db.DB, int64(n), "PUBLISHED", t0.Add(time.Duration(n)*time.Hour))
		}
		n, err := outbox.PurgeInbox(ctx, db.DB, t0.Add(3*time.Hour), 10, 0)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = outbox.PurgePublications(ctx, db.DB, t0.Add(2*time.Hour+time.Microsecond), 1, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		var left int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM inbox").Scan(&left).Error)
		require.EqualValues(t, 2, left)
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM publications").Scan(&left).Error)
		require.EqualValues(t, 2, left)

		for _, purge := range []func(context.Context, *gorm.DB, time.Time, int, time.Duration) (int, error){
			outbox.PurgeInbox, outbox.PurgePublications,
		} {
			_, err = purge(ctx, db.DB, t0, 0, 0)
			require.ErrorContains(t, err, "batch size")
			_, err = purge(ctx, db.DB, t0, outbox.MaxPurgeBatchSize+1, 0)
			require.ErrorContains(t, err, "batch size")
			_, err = purge(ctx, db.DB, t0, 1, -time.Second)
			require.ErrorContains(t, err, "pause")
		}
	})
}
