package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// takeOver makes rows PROCESSING under another instance's claim, as after
// it recovered them as stale and claimed them again: the claims this relay
// holds on them are no longer current, and its writes to them are fenced.
func takeOver(t *testing.T, db *gorm.DB, rows ...outbox.Message) {
	t.Helper()
	for _, m := range rows {
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", m.ID).Updates(map[string]any{
			"status": outbox.StatusProcessing, "claimed_by": "other#00000000",
			"retry_count": gorm.Expr("retry_count + 1"), "version": gorm.Expr("version + 2")}).Error)
	}
}

// A Flush that both hands back the batch claimed for the next poll and
// writes the acknowledgements a full batch deferred, after another instance
// took over rows of both: its Result counts the writes of both parts, the
// fenced releases together with the fenced and the written acknowledgements.
func TestFlushCountsFencedReleasesAndDeferredAcknowledgementsTogether(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks() // SQLite too
		rows := b.append(t, 1, 2, 3, 4, 5, 6)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 3 })

		// A full batch: its acknowledgements wait for the next claim, and
		// the next batch is claimed during its send.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, res.Claimed)
		require.Equal(t, 3, res.Deferred)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
		require.True(t, r.hasNext())
		b.requireStatus(t, rows, outbox.StatusProcessing, "acknowledgements deferred, next batch claimed")

		// Another instance takes over one acknowledged row and two of the
		// next batch.
		takeOver(t, db.DB, rows[2], rows[4], rows[5])

		res, err = r.Flush(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 2, Released: 1, Fenced: 3}, res,
			"two releases and one acknowledgement fenced; one row released, two acknowledgements written")
		b.requireStatus(t, rows[:2], outbox.StatusSent, "")
		b.requireNoAttemptSpent(t, rows[3:4], outbox.StatusPending)
		b.requireStatus(t, []outbox.Message{rows[2], rows[4], rows[5]}, outbox.StatusProcessing, "the other instance's claims stand")
		require.False(t, r.hasNext())
	})
}
