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

// A poll reads the database's clock once, however it claims: from an idle
// relay (a plain read first, then the claim's transaction) and with the
// acknowledgements of the poll before. Its claim is still stamped in the
// database's time, between a reading taken before the poll and one taken
// after it, whatever this instance's own clock says (here three minutes
// ahead).
func TestPollReadsTheDatabaseClockOnceAndStampsItsClaimInIt(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		// Acknowledgements deferred to the next claim on SQLite too.
		store := outbox.NewStore(db).WithDeferredAcks()
		send := relaytest.NewSender()
		r, err := New(store, send, Config{InstanceID: "a", Interval: time.Second, BatchSize: 2, MaxBatchSize: 1,
			StaleAfter: time.Minute, Now: func() time.Time { return time.Now().Add(3 * time.Minute) }})
		require.NoError(t, err)
		b := &bundle{db: db, store: store, send: send}

		var reads atomic.Int64
		databasetest.Before(t, db.DB, databasetest.StmtRow|databasetest.StmtQuery, func(tx *gorm.DB) {
			if isClockRead(tx.Statement.SQL.String()) {
				reads.Add(1)
			}
		})
		poll := func() (Result, time.Time, time.Time) {
			t.Helper()
			before, err := store.Now(ctx)
			require.NoError(t, err)
			reads.Store(0)
			res, err := r.Pump(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(1), reads.Load(), "reads of the database's clock in one poll")
			after, err := store.Now(ctx)
			require.NoError(t, err)
			return res, before, after
		}

		// From idle: one post's event, claimed and sent.
		first := appendEvent(t, db.DB, 1, time.Now())
		res, before, after := poll()
		require.Equal(t, 1, res.Claimed)
		claimed := b.row(t, first.ID)
		require.Equal(t, outbox.StatusSent, claimed.Status)
		require.NotNil(t, claimed.ClaimedAt)
		require.False(t, claimed.ClaimedAt.Before(before), "claimed_at %v before the database's time %v before the poll", claimed.ClaimedAt, before)
		require.False(t, claimed.ClaimedAt.After(after), "claimed_at %v after the database's time %v after the poll", claimed.ClaimedAt, after)

		// A full batch leaves its acknowledgements to the next claim, which
		// writes them with the rows it takes.
		full := []outbox.Message{appendEvent(t, db.DB, 2, time.Now()), appendEvent(t, db.DB, 3, time.Now())}
		res, _, _ = poll()
		require.Equal(t, 2, res.Claimed)
		for _, m := range full {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status, "sent, its SENT left to the next claim")
		}
		last := appendEvent(t, db.DB, 4, time.Now())
		res, before, after = poll()
		require.Equal(t, 1, res.Claimed)
		for _, m := range full {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status, "written by the next poll's claim")
		}
		claimed = b.row(t, last.ID)
		require.False(t, claimed.ClaimedAt.Before(before), "claimed_at %v before the database's time %v before the poll", claimed.ClaimedAt, before)
		require.False(t, claimed.ClaimedAt.After(after), "claimed_at %v after the database's time %v after the poll", claimed.ClaimedAt, after)
	})
}
