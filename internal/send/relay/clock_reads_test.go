package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A poll woken by a commit reads the database's clock only inside the
// claim's transaction, where it stamps the rows: on MySQL and PostgreSQL as
// a column of the claim's read of its candidates, with no round trip of its
// own between the commit and the send; on SQLite, whose clock is the
// process's host's, in one read. What the poll writes after the send is
// timed from that stamp, so sent_at is never before claimed_at. A batch
// claimed beside the send before is sent only after the database has
// answered the poll that sends it (one read of the clock, no claim of its
// own).
func TestWokenPollReadsTheDatabaseClockOnlyInItsClaim(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		// The database's own clock: the reads counted are real statements.
		send := relaytest.NewSender()
		r, err := New(outbox.NewStore(db), send, Config{InstanceID: "a", Interval: time.Minute, BatchSize: 2,
			MaxBatchSize: 1, StaleAfter: 5 * time.Minute})
		require.NoError(t, err)
		var reads atomic.Int64
		databasetest.Before(t, db.DB, databasetest.StmtRow|databasetest.StmtQuery, func(tx *gorm.DB) {
			if isClockRead(tx.Statement.SQL.String()) {
				reads.Add(1)
			}
		})
		// The first poll also looks for stale claims, which reads the clock.
		_, err = r.poll(ctx, pollMode{expect: true})
		require.NoError(t, err)

		// Statements that only read the clock, per claim.
		own := int64(0)
		if db.Dialect == database.SQLite {
			own = 1
		}
		rows := b.append(t, 1)
		before, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		reads.Store(0)
		res, err := r.poll(ctx, pollMode{expect: true})
		require.NoError(t, err)
		require.Equal(t, 1, res.Claimed)
		require.Equal(t, own, reads.Load(), "reads of the database's clock alone by a poll that claimed one row")
		after, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		got := b.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusSent, got.Status)
		require.NotNil(t, got.ClaimedAt)
		// SQLite's own clock reads milliseconds.
		require.False(t, got.ClaimedAt.Before(before.Truncate(time.Millisecond)) || got.ClaimedAt.After(after.Add(time.Millisecond)),
			"claimed_at %v is not the database's time during the poll (%v to %v)", got.ClaimedAt, before, after)
		require.False(t, got.SentAt.Before(*got.ClaimedAt), "sent_at %v before claimed_at %v", got.SentAt, got.ClaimedAt)

		// A full batch, woken as the loop is: the next one is claimed beside
		// its send (a second read, in that claim), and the poll after sends
		// it.
		rows = b.append(t, 2, 3, 4, 5)
		reads.Store(0)
		res, err = r.poll(ctx, pollMode{pipelined: true, expect: true})
		require.NoError(t, err)
		require.Equal(t, 4, res.Claimed)
		require.Equal(t, 2*own, reads.Load(), "reads of the clock alone by a poll that claimed its batch and the next")
		reads.Store(0)
		_, err = r.Pump(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, reads.Load(), int64(1), "the poll sent the kept batch without hearing from the database")
		_, err = r.Flush(ctx)
		require.NoError(t, err)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status, "row %d", m.ID)
			require.False(t, got.SentAt.Before(*got.ClaimedAt), "row %d: sent_at %v before claimed_at %v", m.ID, got.SentAt, got.ClaimedAt)
		}
	})
}
