package relay

import (
	"context"
	"database/sql/driver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// cutDatabase makes every statement through db fail as on a lost connection
// while the returned flag is set: the database restarting.
func cutDatabase(t *testing.T, db *database.DB) *atomic.Bool {
	t.Helper()
	var down atomic.Bool
	fail := func(tx *gorm.DB) {
		if down.Load() {
			_ = tx.AddError(driver.ErrBadConn)
		}
	}
	cb := db.DB.Callback()
	require.NoError(t, cb.Query().Before("gorm:query").Register("test:restart_query", fail))
	require.NoError(t, cb.Row().Before("gorm:row").Register("test:restart_row", fail))
	require.NoError(t, cb.Raw().Before("gorm:raw").Register("test:restart_raw", fail))
	require.NoError(t, cb.Update().Before("gorm:update").Register("test:restart_update", fail))
	return &down
}

// The database restarts while a batch claimed for the next poll waits:
// the polls during the restart fail, and so does the flush that would hand
// the batch back. Once the database answers again the relay hands it back
// itself (no attempt spent, no wait for the stale limit), and every event
// goes out once, in per-post order.
func TestDatabaseRestartWhileTheNextBatchWaits(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		down := cutDatabase(t, db)
		// The database's own clock: a poll begins by reading it.
		r, err := New(outbox.NewStore(db), b.send, Config{InstanceID: "a", Interval: 20 * time.Millisecond,
			BatchSize: 4, StaleAfter: time.Minute})
		require.NoError(t, err)

		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Claimed, "posts 1..4's first events sent, posts 5..8's claimed for the next poll")
		require.True(t, r.hasNext())
		sentBefore := len(b.send.SentIDs())

		down.Store(true)
		_, err = r.Pump(ctx)
		require.Error(t, err)
		_, err = r.Flush(ctx)
		require.Error(t, err)
		require.Equal(t, sentBefore, len(b.send.SentIDs()), "nothing sent while the database is away")
		down.Store(false)

		pumpUntilIdle(t, ctx, r, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))
		for _, m := range rows {
			require.Zero(t, b.row(t, m.ID).RetryCount, "row %d", m.ID)
		}
	})
}
