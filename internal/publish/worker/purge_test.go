package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

const purgeDay = 24 * time.Hour

// cleanerSteps are the cleaner's steps as serve wires them.
var cleanerSteps = []outbox.PurgeStep{
	{Name: "outbox", Purge: outbox.Purge},
	{Name: "inbox", Purge: inbox.Purge},
	{Name: "publications", Purge: worker.PurgePublications},
}

// purgeInbox writes an inbox row of consumer processed at at.
func purgeInbox(t *testing.T, db *gorm.DB, consumer string, n int, at time.Time) {
	t.Helper()
	require.NoError(t, db.Exec("INSERT INTO inbox (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?)",
		consumer, fmt.Sprintf("00000000-0000-7000-8000-%012d", n), "POSTING_EVENT", at).Error)
}

// purgePublication writes a publication of postID last updated at updated.
func purgePublication(t *testing.T, db *gorm.DB, postID int64, status string, updated time.Time) {
	t.Helper()
	require.NoError(t, db.Exec("INSERT INTO publications (post_id, event_id, partition_id, scheduled_at, status, created_at, updated_at) "+
		"VALUES (?, ?, 0, ?, ?, ?, ?)", postID, fmt.Sprintf("00000000-0000-7000-9000-%012d", postID),
		updated, status, updated.Add(-time.Minute), updated).Error)
}

// The cleaner also deletes inbox rows processed and PUBLISHED, CANCELLED or
// EXPIRED publications settled before the database's now - retention, in
// transactions of at most BatchSize rows; young rows and PENDING or FAILED
// publications stay. The instance's own clock, far ahead, changes nothing.
func TestCleanerDeletesOldInboxAndSettledPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		now := databasetest.Now(t, db.DB)
		old, young := now.Add(-8*purgeDay), now.Add(-6*purgeDay)
		// Primary-key order: alpha's rows, then beta's; the second batch
		// spans both consumers.
		for n := 1; n <= 3; n++ {
			purgeInbox(t, db.DB, "alpha", n, old.Add(time.Duration(n)*time.Second))
		}
		purgeInbox(t, db.DB, "alpha", 4, young)
		for n := 5; n <= 8; n++ {
			purgeInbox(t, db.DB, "beta", n, old)
		}
		purgeInbox(t, db.DB, "beta", 9, young)
		for id, st := range map[int64]string{1: "PUBLISHED", 2: "CANCELLED", 3: "PUBLISHED", 4: "PENDING", 5: "FAILED", 6: "CANCELLED", 7: "EXPIRED"} {
			purgePublication(t, db.DB, id, st, old)
		}
		purgePublication(t, db.DB, 8, "PUBLISHED", young)
		purgePublication(t, db.DB, 9, "CANCELLED", young)
		purgePublication(t, db.DB, 10, "PENDING", young)
		deletes := databasetest.Deletes(t, db.DB)

		c, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{
			Retention: 7 * purgeDay, BatchSize: 2, Pause: -1,
			Now: func() time.Time { return time.Now().Add(30 * purgeDay) },
		}, cleanerSteps...)
		require.NoError(t, err)
		res, err := c.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"outbox": 0, "inbox": 7, "publications": 5}, res.Deleted)
		require.Equal(t, []databasetest.Delete{
			{Table: "inbox", Rows: 2}, {Table: "inbox", Rows: 1}, {Table: "inbox", Rows: 1}, {Table: "inbox", Rows: 2}, {Table: "inbox", Rows: 1},
			{Table: "publications", Rows: 2}, {Table: "publications", Rows: 2}, {Table: "publications", Rows: 1},
		}, deletes())

		type inboxKey struct{ Consumer, EventID string }
		var inboxRows []inboxKey
		require.NoError(t, db.Raw("SELECT consumer, event_id FROM inbox ORDER BY consumer, event_id").Scan(&inboxRows).Error)
		require.Equal(t, []inboxKey{
			{"alpha", "00000000-0000-7000-8000-000000000004"},
			{"beta", "00000000-0000-7000-8000-000000000009"},
		}, inboxRows)
		var pubs []int64
		require.NoError(t, db.Raw("SELECT post_id FROM publications ORDER BY post_id").Scan(&pubs).Error)
		require.Equal(t, []int64{4, 5, 8, 9, 10}, pubs)

		// Nothing left: no DELETE at all.
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"outbox": 0, "inbox": 0, "publications": 0}, res.Deleted)
		require.Len(t, deletes(), 8)
	})
}

// inbox.Purge and PurgePublications refuse a batch size out of bounds and
// delete by the cutoff they are given.
func TestPurgeInboxAndPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		for n := 1; n <= 4; n++ {
			purgeInbox(t, db.DB, "w", n, clocktest.T0.Add(time.Duration(n)*time.Hour))
			purgePublication(t, db.DB, int64(n), "PUBLISHED", clocktest.T0.Add(time.Duration(n)*time.Hour))
		}
		n, err := inbox.Purge(ctx, db.DB, clocktest.T0.Add(3*time.Hour), 10, 0)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = worker.PurgePublications(ctx, db.DB, clocktest.T0.Add(2*time.Hour+time.Microsecond), 1, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		var left int64
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM inbox").Scan(&left).Error)
		require.EqualValues(t, 2, left)
		require.NoError(t, db.Raw("SELECT COUNT(*) FROM publications").Scan(&left).Error)
		require.EqualValues(t, 2, left)

		for _, purge := range []func(context.Context, *gorm.DB, time.Time, int, time.Duration) (int, error){
			inbox.Purge, worker.PurgePublications,
		} {
			_, err = purge(ctx, db.DB, clocktest.T0, 0, 0)
			require.ErrorContains(t, err, "batch size")
			_, err = purge(ctx, db.DB, clocktest.T0, database.MaxPurgeBatchSize+1, 0)
			require.ErrorContains(t, err, "batch size")
			_, err = purge(ctx, db.DB, clocktest.T0, 1, -time.Second)
			require.ErrorContains(t, err, "pause")
		}
	})
}

// The cleaner deletes a published post's inbox row and publication after the
// retention; when its reservation event is delivered again later (a consumer
// group reset, a replay), the worker takes it for new, but the post says
// PUBLISHED: nothing is published a second time, and the outcome counter
// (posting_worker_publications_total{outcome}) does not count a second
// publication either.
func TestWorkerRedeliveryAfterTheCleanerPublishesNothing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		var outcomes tally
		pub := &recorder{}
		// A short sweep: a redelivery that lands while the first timer is
		// still winding down is armed by the sweep, not at once.
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), SweepInterval: 100 * time.Millisecond,
			ObserveSettled: outcomes.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)

		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
		rec := reservationRecord(t, post)
		require.NoError(t, w.Handle(ctx, decode(t, rec, 0)))
		awaitPublished(t, db.DB, post)

		// The retention has passed for both rows.
		later := time.Now().Add(time.Hour)
		n, err := inbox.Purge(ctx, db.DB, later, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = worker.PurgePublications(ctx, db.DB, later, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		require.NoError(t, w.Handle(ctx, decode(t, rec, 0)))
		require.Eventually(t, func() bool {
			var p []worker.Publication
			require.NoError(t, db.DB.Where("post_id = ?", post.ID).Find(&p).Error)
			return len(p) == 1 && p[0].Status != worker.PublicationPending
		}, 20*time.Second, 10*time.Millisecond, "the re-created publication is settled")
		w.Stop()

		require.Equal(t, 1, pub.count(post.ID), "published again")
		require.Equal(t, worker.PublicationPublished, loadPublication(t, db.DB, post.ID).Status)
		require.Equal(t, map[string]int{worker.OutcomePublished: 1}, outcomes.counts(), "one publication, counted once")
	})
}
