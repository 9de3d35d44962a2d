package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// A pipelined poll writes the results of the batch it sent only once the
// claim of the next batch, run beside the send, has returned. When that
// claim hangs on the database (here: a row lock on a deferred
// acknowledgement it writes; in production a lock wait, a dropped
// connection that has not timed out yet), the batch already sent stays
// PROCESSING for as long, past the stale limit, and another instance would
// recover it and send it a second time with a retry spent. The claim of a
// batch that would be released unsent anyway once older than a tenth of
// StaleAfter must not be waited for longer than that.
func TestSlowNextClaimDoesNotHoldTheSentBatch(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		if db.Dialect == database.SQLite {
			t.Skip("SQLite's one write lock holds the batch's own write as well; the row lock is MySQL's and PostgreSQL's")
		}
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 6, 1)
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 2; c.StaleAfter = 2 * time.Second })

		// Rows 1,2 sent (their SENT deferred to the next claim), rows 3,4
		// claimed for the next poll.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, res.Claimed)
		require.Equal(t, 2, res.Deferred)

		// The next claim writes rows 1,2's SENT first: it waits for this lock.
		release := holdWrites(t, db, rows[0].ID)
		done := make(chan error, 1)
		go func() { _, err := r.Pump(ctx); done <- err }()
		var pumpErr error
		select {
		case pumpErr = <-done:
		case <-time.After(10 * r.Config().StaleAfter):
			release()
			<-done
			t.Fatalf("the poll that sent rows 3,4 waited %s for the next claim: past the stale limit %s",
				10*r.Config().StaleAfter, r.Config().StaleAfter)
		}
		require.ErrorContains(t, pumpErr, "claim the next batch")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID}, b.send.SentIDs())
		release()

		// What the timed-out claim left is written by the next polls; each
		// event goes out once, no retry spent.
		pumpUntilIdle(t, ctx, r, 10)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: 6}, relaytest.CountByStatus(t, db.DB))
		for _, m := range rows {
			require.Zero(t, b.row(t, m.ID).RetryCount, "row %d", m.ID)
		}
	})
}
