package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Stale recovery beside another relay's open claim transaction, on a young
// outbox: it takes back a claim left by a dead relay at once, without
// waiting for the live claim's transaction. On MariaDB RecoverStale's
// UPDATEs (status = PROCESSING AND claimed_at < ?, in a REPEATABLE READ
// transaction) read every PROCESSING entry of idx_outbox_status_created_id
// with a lock, the live claim's fresh rows among them, so it waited for
// that claim to commit. MySQL only, as TestClaimBesideAnOpenClaimTakesOtherRowsAtOnce.
func TestRecoverStaleBesideAnOpenClaimDoesNotWaitForIt(t *testing.T) {
	t.Parallel()
	pools, first, second, rows := youngOutboxOnTwoPools(t)
	dead := rows[0].ID
	first.set(t, dead, outbox.StatusProcessing, nil) // claimed at t0 by "other", long stale

	var (
		updates    atomic.Int32
		rec        outbox.Recovery
		recErr     error
		recElapsed time.Duration
	)
	databasetest.After(t, pools[0].DB, databasetest.StmtUpdate, func(tx *gorm.DB) {
		if tx.Statement.Schema == nil || tx.Statement.Schema.Table != "outbox" || updates.Add(1) != 1 {
			return
		}
		// The first claim's transaction is open, its rows PROCESSING
		// and not committed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		rec, recErr = second.store.RecoverStale(ctx, time.Now().Add(-time.Minute), 5, time.Now())
		recElapsed = time.Since(start)
	})
	mine, err := first.store.Claim(context.Background(), "first", 10, time.Time{})
	require.NoError(t, err)
	require.Len(t, mine, 10)
	require.EqualValues(t, 1, updates.Load())
	require.NoError(t, recErr, "stale recovery beside the open claim (took %s)", recElapsed)
	require.Equal(t, outbox.Recovery{Retried: 1}, rec)
	require.Equal(t, outbox.StatusRetry, first.row(t, dead).Status)
}
