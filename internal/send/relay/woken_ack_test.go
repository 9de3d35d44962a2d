package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A pipelined poll woken during its send (rows were committed since its
// claim) leaves the SENT write of a batch that is not full to the next
// poll's claim transaction, which also claims what was committed: one write
// transaction instead of two. Without a wake the write is made at once, and
// RunOnce, which no loop follows, never defers for a wake.
func TestPumpWokenDuringItsSendLeavesSentToTheNextClaim(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks() // SQLite writes them at once unless told
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 10 })

		first := b.append(t, 1, 2)
		release := b.send.Hold()
		done := make(chan Result, 1)
		go func() {
			res, err := r.Pump(ctx)
			require.NoError(t, err)
			done <- res
		}()
		require.Eventually(t, func() bool { return b.send.Calls() == 1 }, 10*time.Second, time.Millisecond)
		more := b.append(t, 1, 3) // committed during the send
		r.Wake()
		release()
		res := <-done
		require.Equal(t, Result{Claimed: 2, Deferred: 2}, res)
		b.requireStatus(t, first, outbox.StatusProcessing, "SENT waits for the next claim")
		require.True(t, r.woken(), "the wake is left for the loop")

		// The next poll writes them and claims post 1's second event, now
		// its head, in the same transaction.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 4, Claimed: 2}, res)
		b.requireStatus(t, append(first, more...), outbox.StatusSent, "")

		// No wake: written at once.
		last := b.append(t, 4)
		res, err = r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 1, Claimed: 1}, res)
		b.requireStatus(t, last, outbox.StatusSent, "")

		// RunOnce, with a wake waiting: written at once too.
		last = b.append(t, 5)
		r.Wake()
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 1, Claimed: 1}, res)
		b.requireStatus(t, last, outbox.StatusSent, "")
	})
}

// The loop, woken during a send, polls again without a pause and without a
// SENT write of its own: every row ends SENT, in post order, and the
// acknowledgements of the batch sent during the wake were carried by the
// next claim.
func TestLoopWokenDuringASendCarriesItsAcknowledgementsToTheNextClaim(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks()
		b.clock.Set(time.Now().Add(-time.Second)) // rows due on the loop's real clock
		first := b.append(t, 1, 2)
		release := b.send.Hold()
		r, loop := b.startOnWakes(t, func(c *Config) { c.BatchSize = 10 })
		require.Eventually(t, func() bool { return b.send.Calls() == 1 }, 10*time.Second, time.Millisecond)
		more := b.append(t, 1)
		r.Wake()
		release()
		require.Eventually(t, func() bool {
			for _, m := range append(first, more...) {
				if b.row(t, m.ID).Status != outbox.StatusSent {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "the woken loop did not send and record every row")
		require.Equal(t, []int64{first[0].ID, first[1].ID, more[0].ID}, b.send.SentIDs())
		// 2: the first batch's, written by the woken poll's claim; 1: the
		// second batch's, written by the claim of the poll that follows it.
		require.Equal(t, 3, loop.now().deferred, "acknowledgements that went with the next claim")
	})
}

// A claim that carries deferred acknowledgements is bounded by WriteTimeout,
// as their own write would be: when the database hangs on it, the claim
// gives up, the acknowledgements are kept, and the next poll writes them
// once the database answers.
func TestClaimCarryingAcknowledgementsGivesUpAfterTheWriteTimeout(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks()
		var hang atomic.Bool
		databasetest.Before(t, db.DB, databasetest.StmtUpdate, func(tx *gorm.DB) {
			if hang.Load() {
				<-tx.Statement.Context.Done() // a database that never answers
				_ = tx.AddError(tx.Statement.Context.Err())
			}
		})
		r := b.relay(t, "a", func(c *Config) { c.BatchSize, c.WriteTimeout = 2, 100*time.Millisecond })
		rows := b.append(t, 1, 2)
		res, err := r.Pump(ctx) // a full batch: its acknowledgements wait for the next claim
		require.NoError(t, err)
		require.Equal(t, 2, res.Deferred)

		hang.Store(true)
		done := make(chan error, 1)
		go func() {
			_, err := r.Pump(ctx)
			done <- err
		}()
		err = requireWithin(t, done, 30*time.Second, "a claim carrying acknowledgements waited on a hung database")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		b.requireStatus(t, rows[:2], outbox.StatusProcessing, "nothing was written")

		hang.Store(false)
		_, err = r.Pump(ctx)
		require.NoError(t, err)
		_, err = r.Flush(ctx)
		require.NoError(t, err)
		b.requireStatus(t, rows, outbox.StatusSent, "the kept acknowledgements were written")
	})
}
