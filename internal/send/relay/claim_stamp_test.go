package relay

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A claim is stamped with the database's time when it is taken. When the
// database's clock reads later at the claim than it did at the start of the
// poll (a failover, between the two, to a server whose clock runs ahead; a
// relay host that slept, which stops the process's monotonic clock), a stamp
// carried over from the poll's start makes the live claim look older than
// it is, up to stale for the other instances: one of them recovers it during
// its send, spends an attempt and sends the row again.
func TestClaimIsStampedWithTheDatabaseTimeWhenItIsTaken(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1)
		a, other := b.relay(t, "a"), b.relay(t, "b") // StaleAfter: a minute

		// Between the poll's read of the clock and its claim (here at the
		// plain look for a due row, or, where a claim with nothing to
		// acknowledge is one statement with no look before it, at the
		// poll's look for stale claims) the database's clock moves two
		// minutes on.
		var jumped atomic.Bool
		jump := func() {
			if jumped.CompareAndSwap(false, true) {
				b.clock.Add(2 * time.Minute)
			}
		}
		if b.store.ClaimsInOneStatement() {
			databasetest.After(t, db.DB, databasetest.StmtQuery, func(tx *gorm.DB) {
				if strings.Contains(tx.Statement.SQL.String(), "claimed_at <") {
					jump()
				}
			})
		} else {
			databasetest.Before(t, db.DB, databasetest.StmtQuery|databasetest.StmtRow, func(tx *gorm.DB) {
				if read, inTx := candidatesRead(tx); read && !inTx {
					jump()
				}
			})
		}

		// During a's send, the other instance looks for stale claims.
		recovered := make(chan Result, 1)
		b.send.BeforeNextSend(func() {
			res, err := other.RunOnce(ctx)
			assert.NoError(t, err)
			recovered <- res
		})
		res, err := a.RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, jumped.Load(), "the poll looked for a due row or for stale claims")
		require.Equal(t, 1, res.Claimed)
		claimTime := b.clock.Now() // the database's time at the claim (the clock has not moved since)

		got := b.row(t, rows[0].ID)
		require.NotNil(t, got.ClaimedAt)
		assert.False(t, got.ClaimedAt.Before(claimTime.Add(-time.Second)),
			"claimed_at %v: more than a second before the database's time %v when the claim was taken", got.ClaimedAt, claimTime)
		assert.Zero(t, (<-recovered).Recovered, "a live claim recovered as stale")
		assert.Zero(t, res.Fenced, "a's acknowledgement refused")
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
	})
}
