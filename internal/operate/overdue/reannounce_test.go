package overdue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A post whose next announcement's dedup key is taken already (its count
// reset while the outbox kept the rows: 00011 down and up again, a restore)
// is counted past that announcement and announced at the next one; it does
// not fail the check's round, which stopped every later post's
// re-announcement at each check.
func TestReannounceGoesPastAnAnnouncementTheOutboxHoldsAlready(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		reset := f.post(reservation.StatusWorking, -10*time.Minute, nil)
		f.reservation(reset, outbox.StatusSent, -9*time.Minute)
		e, err := event.New(event.ReservationEvent, reset, f.now, event.ReservationEventFields{ScheduledAt: f.now})
		require.NoError(t, err)
		m, err := outbox.Append(db.DB, reservation.OutboxEvent(e, fmt.Sprintf("reservation:%d:1", reset)))
		require.NoError(t, err)
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", m.ID).
			Updates(map[string]any{"status": outbox.StatusSent, "sent_at": f.now.Add(-8 * time.Minute)}).Error)
		later := f.post(reservation.StatusWorking, -9*time.Minute, nil)
		f.reservation(later, outbox.StatusSent, -8*time.Minute)

		c := newChecker(t, db, "a", 3)
		res, err := c.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Reannounced, "the later post is announced again")
		require.Equal(t, 1, databasetest.Load[reservation.Post](t, db.DB, later).Reannounced)
		require.Equal(t, 1, databasetest.Load[reservation.Post](t, db.DB, reset).Reannounced, "counted past the one held")

		// Its first announcement sent long ago, the next check announces
		// the post with the next key.
		res, err = c.RunOnce(context.Background())
		require.NoError(t, err)
		var keys []string
		require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ? AND event_type = ?", reset, event.ReservationEvent).
			Order("id").Pluck("dedup_key", &keys).Error)
		require.Equal(t, []string{fmt.Sprintf("reservation:%d", reset), fmt.Sprintf("reservation:%d:1", reset),
			fmt.Sprintf("reservation:%d:2", reset)}, keys)
		require.Equal(t, 1, res.Reannounced)
	})
}
