package relay

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A poll takes the database's time from its claim: on PostgreSQL and
// SQLite the claim's own statements stamp the rows, on MySQL its
// transaction reads the clock once, and what the poll writes after the
// send (sent_at) is the claim's time moved on, never a time before it.
func TestPollTakesTheDatabaseTimeFromItsClaim(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		var counting atomic.Bool
		var reads atomic.Int64
		databasetest.After(t, db.DB, databasetest.StmtAll, func(tx *gorm.DB) {
			if counting.Load() && isClockRead(tx.Statement.SQL.String()) {
				reads.Add(1)
			}
		})
		// The database's clock, not the tests' (an Interval long enough
		// that stale recovery, which reads it, runs only at the first poll).
		r, err := New(outbox.NewStore(db), b.send, Config{InstanceID: "a", Interval: time.Hour, BatchSize: 100,
			StaleAfter: 3 * time.Hour})
		require.NoError(t, err)
		_, err = r.RunOnce(ctx)
		require.NoError(t, err)

		rows := b.append(t, 1, 2, 3)
		before, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		counting.Store(true)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		counting.Store(false)
		after, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		require.Equal(t, 3, res.Claimed)
		require.Equal(t, 3, res.Sent)

		want := int64(0)
		if db.Dialect == database.MySQL {
			want = 1 // no RETURNING: the claim transaction reads it for the rows it stamps
		}
		require.Equal(t, want, reads.Load(), "reads of the database's clock in a poll that claims, sends and records")
		// SQLite's clock reads in milliseconds; the stamps are microseconds.
		after = after.Add(time.Millisecond)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.NotNil(t, got.ClaimedAt)
			require.NotNil(t, got.SentAt)
			require.False(t, got.ClaimedAt.Before(before.Truncate(time.Millisecond)), "claimed_at %v before the poll (%v)", got.ClaimedAt, before)
			require.False(t, got.SentAt.Before(*got.ClaimedAt), "sent_at %v before claimed_at %v", got.SentAt, got.ClaimedAt)
			require.False(t, got.SentAt.After(after), "sent_at %v after the poll (%v)", got.SentAt, after)
		}
	})
}

// isClockRead reports whether query is a read of the database's clock
// alone (database.Now).
func isClockRead(query string) bool {
	switch strings.TrimSpace(query) {
	case "SELECT clock_timestamp()", "SELECT CURRENT_TIMESTAMP(6)", "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')":
		return true
	}
	return false
}
