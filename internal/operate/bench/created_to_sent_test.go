package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/bench"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A post with a second POSTING_EVENT (an update) counts once, by its
// first event, and does not stand in for another post whose event has no
// sent_at yet: created -> sent_at waits for that one, and then fails.
func TestCreatedToSentCountsEachPostOnceByItsFirstEvent(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		created := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
		var ids []int64
		for range 2 {
			p, err := svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Now().Add(48 * time.Hour)})
			require.NoError(t, err)
			ids = append(ids, p.ID)
		}
		title := "changed"
		_, err = svc.Update(ctx, ids[0], reservation.UpdateInput{Title: &title})
		require.NoError(t, err)
		// The first post's two events are sent, 10 ms and 500 ms after
		// their created; the second post's event is not sent yet.
		var rows []struct{ ID int64 }
		require.NoError(t, db.Table("outbox").Select("id").Where("aggregate_id = ?", ids[0]).Order("id").Scan(&rows).Error)
		require.Len(t, rows, 2)
		for i, d := range []time.Duration{10 * time.Millisecond, 500 * time.Millisecond} {
			require.NoError(t, db.Table("outbox").Where("id = ?", rows[i].ID).
				Updates(map[string]any{"created": created, "sent_at": created.Add(d), "status": outbox.StatusSent}).Error)
		}
		_, err = bench.CreatedToSent(ctx, db.DB, ids, 100*time.Millisecond)
		require.ErrorContains(t, err, "1 of 2 posts' events have no sent_at")

		got, err := bench.CreatedToSent(ctx, db.DB, ids[:1], time.Second)
		require.NoError(t, err)
		require.Equal(t, 1, got.Events)
		require.Equal(t, 10*time.Millisecond, got.Max)
	})
}
