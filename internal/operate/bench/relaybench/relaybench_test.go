package relaybench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/operate/bench/relaybench"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// TestDrains checks that each measurement moves every seeded row to SENT
// and counts exactly those rows, and that Relay keeps per-post order. The
// dialects run at once: each has its own database, and SQLite's drains
// (CPU in this process) overlap the servers' (waits on MariaDB and
// PostgreSQL).
func TestDrains(t *testing.T) {
	eachParallel(t, func(t *testing.T, db *database.DB) {
		const n = 1203 // not a multiple of 5 nor of the batch
		ctx := context.Background()
		run := func(name string, f func() (relaybench.Result, error)) {
			t.Helper()
			require.NoError(t, db.Exec("DELETE FROM outbox").Error)
			require.NoError(t, relaybench.Seed(ctx, db.DB, n))
			require.Equal(t, map[outbox.Status]int64{outbox.StatusPending: n}, relaytest.CountByStatus(t, db.DB), name)
			res, err := f()
			require.NoError(t, err, name)
			require.Equal(t, n, res.Events, name)
			require.Positive(t, res.Elapsed, name)
			require.Positive(t, res.PerSecond(), name)
			require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: n}, relaytest.CountByStatus(t, db.DB), name)
		}
		run("raw", func() (relaybench.Result, error) { return relaybench.Raw(ctx, db.DB, 500) })
		s := relaytest.NewSender()
		run("seed style", func() (relaybench.Result, error) { return relaybench.SeedStyle(ctx, db.DB, s) })
		require.Len(t, s.SentIDs(), n)
		s = relaytest.NewSender()
		run("relay", func() (relaybench.Result, error) { return relaybench.Relay(ctx, db.DB, s, 100) })
		ids := s.SentIDs()
		require.Len(t, ids, n)
		var rows []outbox.Message
		require.NoError(t, db.Find(&rows).Error)
		post := map[int64]int64{}
		for _, m := range rows {
			post[m.ID] = m.AggregateID
		}
		last := map[int64]int64{}
		for _, id := range ids {
			require.Greater(t, id, last[post[id]], "post %d out of order", post[id])
			last[post[id]] = id
		}
		require.Len(t, last, (n+4)/5)
	})
}

// eachParallel is databasetest.Each with the dialects' subtests run in
// parallel.
func eachParallel(t *testing.T, fn func(t *testing.T, db *database.DB)) {
	t.Helper()
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, databasetest.New(t, d))
		})
	}
}

// TestRelayStalls checks that a sender that rejects everything ends the
// drain with ErrStalled instead of looping.
func TestRelayStalls(t *testing.T) {
	db := databasetest.NewSQLite(t)
	ctx := context.Background()
	require.NoError(t, relaybench.Seed(ctx, db.DB, 10))
	s := relaytest.NewSender()
	s.Reject(func(event.Message) error { return context.DeadlineExceeded })
	_, err := relaybench.Relay(ctx, db.DB, s, 100)
	require.ErrorIs(t, err, relaybench.ErrStalled)
}

// TestSeedPostsWritesEventsPerPost: SeedPosts writes n PENDING rows,
// perPost to a post, the last post short when n is not a multiple.
func TestSeedPostsWritesEventsPerPost(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		for _, perPost := range []int{1, 3} {
			require.NoError(t, db.Exec("DELETE FROM outbox").Error)
			require.NoError(t, relaybench.SeedPosts(context.Background(), db.DB, 10, perPost))
			require.Equal(t, map[outbox.Status]int64{outbox.StatusPending: 10}, relaytest.CountByStatus(t, db.DB))
			var posts int64
			require.NoError(t, db.Raw("SELECT COUNT(DISTINCT aggregate_id) FROM outbox").Scan(&posts).Error)
			require.EqualValues(t, (10+perPost-1)/perPost, posts, "%d events per post", perPost)
		}
	})
}
