package relay

import (
	"context"
	"database/sql/driver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A poll that writes a rejection kept from a failed write, and then, as
// it looks for stale claims, the acknowledgements the poll before deferred,
// after another instance took over rows of both: its Result counts the
// fenced rejection together with the acknowledgements, fenced and written.
func TestPollCountsFencedRejectionsAndDeferredAcknowledgementsTogether(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks() // SQLite too
		rows := b.append(t, 1, 2, 3)
		b.send.Reject(func(m event.Message) error {
			if m.Sequence() == rows[2].ID {
				return errRejected
			}
			return nil
		})
		failed := failWriteOnce(t, db, outbox.StatusRetry)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 3 })

		// A full batch: two acknowledgements deferred to the next claim,
		// one rejection whose write fails and is kept for the next poll.
		res, err := r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.True(t, failed.Load())
		require.Equal(t, 2, res.Deferred)
		b.requireStatus(t, rows, outbox.StatusProcessing, "nothing written yet")

		// Another instance takes over the rejected row and one acknowledged row.
		takeOver(t, db.DB, rows[1], rows[2])
		b.clock.Add(time.Second) // stale claims are looked for again, the deferred acknowledgements written first

		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 1, Fenced: 2}, res,
			"the rejection and one acknowledgement fenced, one acknowledgement written")
		b.requireStatus(t, rows[:1], outbox.StatusSent, "")
		b.requireStatus(t, rows[1:], outbox.StatusProcessing, "the other instance's claims stand")
	})
}

// A poll that hands back rows kept from a failed release, and then the
// batch it sent to an unreachable broker: its Result counts both releases.
func TestPollCountsKeptAndUnreachableReleasesTogether(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 2)
		b.send.SetDown(unreachable)
		var failRelease atomic.Bool
		failRelease.Store(true)
		databasetest.Fail(t, db.DB, databasetest.StmtUpdate, driver.ErrBadConn, func(tx *gorm.DB) bool {
			m, ok := tx.Statement.Dest.(map[string]any)
			if !ok {
				return false
			}
			_, release := m["status"].(clause.Expr) // only Release sets the status by an expression
			return release && failRelease.CompareAndSwap(true, false)
		})
		r := b.relay(t, "a")

		res, err := r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.False(t, failRelease.Load())
		require.True(t, res.Unavailable)
		require.Zero(t, res.Released, "the release failed")
		b.requireStatus(t, rows, outbox.StatusProcessing, "kept to release at the next try")

		// The broker is still down: the kept rows go back first, and, due
		// at once, are claimed again with a new one, sent, and released.
		rows = append(rows, b.append(t, 3)...)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Claimed: 3, Released: 5, Unavailable: true}, res,
			"two kept rows released, then the three of this batch")
		b.requireNoAttemptSpent(t, rows, outbox.StatusPending)
	})
}
