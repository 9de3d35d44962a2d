package reservation

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
		posts := make([]Post, 35)
		for i := range posts {
			posts[i] = Post{Title: "t", Content: "c", Status: StatusReserved, ScheduledAt: now.Add(time.Minute), CreatedAt: now, UpdatedAt: now}
		}
		require.NoError(t, db.CreateInBatches(posts, 100).Error)
		var runs []SchedulerResult
		s, err := NewScheduler(db.DB, SchedulerConfig{BatchSize: 5, MaxPerRun: 10, Now: func() time.Time { return now },
			Logger: slog.New(slog.DiscardHandler), Observe: func(res SchedulerResult, _ time.Duration, err error) {
				require.NoError(t, err)
				runs = append(runs, res)
			}})
		require.NoError(t, err)
		s.run(context.Background(), s.cfg.Logger)
		var working int64
		require.NoError(t, db.Model(&Post{}).Where("status = ?", StatusWorking).Count(&working).Error)
		require.EqualValues(t, 35, working, "one tick reserved every due post")
		require.Equal(t, []SchedulerResult{{Marked: 10, More: true}, {Marked: 10, More: true}, {Marked: 10, More: true}, {Marked: 5}}, runs)
	})
}
