package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/bench"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// BenchmarkRawCreate is the yardstick of BenchmarkCreate in internal/write/api/: the same
// two rows per create in plain SQL, 32 clients, for 3 s on MySQL; it
// reports posts/s (b.N is ignored; run with -benchtime 1x):
//
//	POSTING_TEST_REQUIRE_MYSQL=1 go test -run '^$' -bench RawCreate -benchtime 1x -cpuprofile /tmp/raw.prof ./internal/operate/bench/
func BenchmarkRawCreate(b *testing.B) {
	db := databasetest.NewMySQL(b)
	b.ResetTimer()
	res, err := bench.RawCreate(context.Background(), db, 32, 3*time.Second)
	require.NoError(b, err)
	b.ReportMetric(res.PerSecond(), "posts/s")
}

// TestBenchCleanerKeepsAConcurrentWritersRows: on a database that held
// posts (--allow-nonempty), a post and its event that another writer adds
// while the bench runs get ids above the bench's marks, interleaved with the
// bench's own; the bench's clean-up must not delete them.
func TestBenchCleanerKeepsAConcurrentWritersRows(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		at := time.Now().Add(48 * time.Hour)
		before, err := svc.Create(ctx, reservation.CreateInput{Title: "before", Content: "keep", ScheduledAt: at})
		require.NoError(t, err)

		clean, err := bench.NewCleaner(ctx, db, true)
		require.NoError(t, err)
		during, err := svc.Create(ctx, reservation.CreateInput{Title: "during", Content: "keep too", ScheduledAt: at})
		require.NoError(t, err)
		require.NoError(t, clean(ctx))

		var ids []int64
		require.NoError(t, db.Table("posts").Order("id").Pluck("id", &ids).Error)
		require.Equal(t, []int64{before.ID, during.ID}, ids, "a post the bench did not write is kept")
		var rows int64
		require.NoError(t, db.Table("outbox").Count(&rows).Error)
		require.EqualValues(t, 2, rows, "their CREATED events are kept")
	})
}

// The bench's clean-up deletes the posts and events it wrote and settles
// the tables (on PostgreSQL: vacuumed and analyzed), so the next
// measurement does not run through their dead rows.
func TestBenchCleanerDeletesItsRowsAndSettlesTheTables(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		clean, err := bench.NewCleaner(ctx, db, false)
		require.NoError(t, err)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		for range 3 {
			_, err := svc.Create(ctx, reservation.CreateInput{Title: "bench", Content: "gone", ScheduledAt: time.Now().Add(48 * time.Hour)})
			require.NoError(t, err)
		}
		require.NoError(t, clean(ctx))
		for _, table := range []string{"posts", "outbox"} {
			var rows int64
			require.NoError(t, db.Table(table).Count(&rows).Error)
			require.Zero(t, rows, table)
		}
		if db.Dialect != database.PostgreSQL {
			return
		}
		var vacuumed []string
		require.NoError(t, db.Raw("SELECT relname FROM pg_stat_user_tables WHERE relname IN ('posts', 'outbox', 'publications') "+
			"AND last_vacuum IS NOT NULL AND last_analyze IS NOT NULL ORDER BY relname").Scan(&vacuumed).Error)
		require.Equal(t, []string{"outbox", "posts", "publications"}, vacuumed)
	})
}

// On MySQL the bench's clean-up returns only once InnoDB has purged the
// rows it deleted: while a snapshot taken before the clean-up holds purge
// back it waits, and it returns once the snapshot ends.
func TestBenchCleanerWaitsForMySQLsPurgeOfItsRows(t *testing.T) {
	t.Parallel()
	db := databasetest.NewMySQL(t)
	ctx := context.Background()
	clean, err := bench.NewCleaner(ctx, db, false)
	require.NoError(t, err)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	_, err = svc.Create(ctx, reservation.CreateInput{Title: "bench", Content: "purged", ScheduledAt: time.Now().Add(48 * time.Hour)})
	require.NoError(t, err)
	reader := databasetest.HoldSnapshot(t, db)

	cleaned := make(chan error, 1)
	go func() { cleaned <- clean(ctx) }()
	select {
	case err := <-cleaned:
		t.Fatalf("the clean-up returned (%v) while a snapshot kept its deleted rows from purge", err)
	case <-time.After(time.Second):
	}
	_, err = reader.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	select {
	case err := <-cleaned:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the clean-up has not returned after the snapshot ended")
	}
}

// The relay's own record of a post's event is read from its outbox row:
// created to sent_at, over the posts asked for, and a post whose event was
// not acknowledged in time is an error, not a figure without it.
func TestCreatedToSentReadsTheRelaysRecord(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		created := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
		var ids []int64
		for i := range 4 {
			p, err := svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Now().Add(48 * time.Hour)})
			require.NoError(t, err)
			ids = append(ids, p.ID)
			changes := map[string]any{"created": created, "sent_at": created.Add(time.Duration(i+1) * 10 * time.Millisecond), "status": outbox.StatusSent}
			require.NoError(t, db.Table("outbox").Where("aggregate_id = ?", p.ID).Updates(changes).Error)
		}
		got, err := bench.CreatedToSent(ctx, db.DB, ids[:3], time.Second)
		require.NoError(t, err)
		require.Equal(t, 3, got.Events)
		require.Equal(t, 20*time.Millisecond, got.P50)
		require.Equal(t, 30*time.Millisecond, got.Max)

		require.NoError(t, db.Table("outbox").Where("aggregate_id = ?", ids[3]).Update("sent_at", nil).Error)
		_, err = bench.CreatedToSent(ctx, db.DB, ids, 100*time.Millisecond)
		require.ErrorContains(t, err, "1 of 4 posts' events have no sent_at")
	})
}

// Four relays draining one backlog together send every event once between
// them, leave every row SENT, and count what they sent.
func TestRelayInstancesDrainOneBacklogOnce(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		rows := relaytest.Seed(t, db.DB, 40, 5, time.Now().Add(-time.Second))
		fakes := []*relaytest.Sender{relaytest.NewSender(), relaytest.NewSender(), relaytest.NewSender(), relaytest.NewSender()}
		senders := make([]relay.Sender, len(fakes))
		for i, f := range fakes {
			senders[i] = f
		}
		res, err := bench.RelayInstances(context.Background(), db, senders)
		require.NoError(t, err)
		require.Equal(t, len(rows), res.Count)
		require.Positive(t, res.Elapsed)
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))
		sends := map[string]int{}
		for _, f := range fakes {
			for _, id := range f.SentEventIDs() {
				sends[id]++
			}
		}
		for _, m := range rows {
			require.Equal(t, 1, sends[m.EventID], "event %s", m.EventID)
		}
	})
}

func TestRelayInstancesNeedsASender(t *testing.T) {
	_, err := bench.RelayInstances(context.Background(), databasetest.NewSQLite(t), nil)
	require.ErrorContains(t, err, "no sender")
}

// The raw batches the bench prints as the batch endpoint's floor write
// what they count: each post with its one CREATED event.
func TestRawBatchCreateWritesEachPostWithItsEvent(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		res, err := bench.RawBatchCreate(context.Background(), db, 7, 200*time.Millisecond)
		require.NoError(t, err)
		require.Positive(t, res.Count)
		require.Zero(t, res.Count%7, "whole batches of 7 posts")
		var posts, events, matched int64
		require.NoError(t, db.Table("posts").Count(&posts).Error)
		require.NoError(t, db.Table("outbox").Where("event_type = ?", "POSTING_EVENT").Count(&events).Error)
		require.NoError(t, db.Table("outbox").Joins("JOIN posts ON posts.id = outbox.aggregate_id").Count(&matched).Error)
		require.EqualValues(t, res.Count, posts, "the posts counted are written")
		require.EqualValues(t, res.Count, events, "one event a post")
		require.EqualValues(t, res.Count, matched, "each event names a written post")
	})
}
