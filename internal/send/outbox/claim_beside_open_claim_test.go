package outbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A relay's claim while another relay's claim transaction is open, on a
// young outbox (100 rows), takes rows that one does not, at once: it
// neither passes over rows the other only scanned, nor waits for them. On
// such a table MariaDB read the claim's statements by a scan of the whole
// table, and kept a lock on every row it passed (Driver.ThroughIndex).
// Then the second claim waited until the lock wait's timeout. Then it
// acknowledges what it claimed while the other's claim is still open.
// MySQL only: PostgreSQL claims in one statement (Store.ClaimsInOneStatement),
// which locks only the rows it returns, and SQLite's writers take turns.
func TestClaimBesideAnOpenClaimTakesOtherRowsAtOnce(t *testing.T) {
	t.Parallel()
	pools, first, second, _ := youngOutboxOnTwoPools(t)

	var (
		reads       atomic.Int32
		took, acked []outbox.Message
		fenced      int
		secondErr   error
	)
	databasetest.After(t, pools[0].DB, databasetest.StmtQuery|databasetest.StmtRow, func(tx *gorm.DB) {
		_, locking := tx.Statement.Clauses["FOR"]
		if !locking || tx.Statement.Schema == nil || tx.Statement.Schema.Table != "outbox" || reads.Add(1) != 1 {
			return
		}
		// The first claim's transaction is open, its candidates
		// read and locked. 20 s is far less than the lock
		// wait's timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var err error
		took, err = second.store.Claim(ctx, "second", 50, time.Time{})
		secondErr = errors.Join(secondErr, err)
		if err == nil {
			acked, fenced, err = second.store.MarkSentAndClaim(ctx, took, time.Now(), "second", 0, time.Time{})
			secondErr = errors.Join(secondErr, err)
		}
	})
	mine, err := first.store.Claim(context.Background(), "first", 10, time.Time{})
	require.NoError(t, err)
	require.NoError(t, secondErr, "the second claim, beside the open first one")
	require.EqualValues(t, 1, reads.Load(), "the first claim locked its candidates once")
	require.Len(t, mine, 10)
	require.Len(t, took, 50, "the second claim took the rows the first did not")
	require.Empty(t, acked)
	require.Zero(t, fenced)
	taken := map[int64]bool{}
	for _, m := range mine {
		taken[m.ID] = true
	}
	for _, m := range took {
		require.False(t, taken[m.ID], "row %d claimed twice", m.ID)
	}
	var sent int64
	require.NoError(t, pools[0].DB.Model(&outbox.Message{}).Where("status = ?", outbox.StatusSent).Count(&sent).Error)
	require.EqualValues(t, 50, sent)
}

// youngOutboxOnTwoPools makes a MySQL database with an outbox of 100
// PENDING rows, one per aggregate, an hour old, and a bundle on each of two
// pools, as two relays have; it returns the pools, the bundles and the
// rows.
func youngOutboxOnTwoPools(t *testing.T) (pools []*database.DB, first, second *bundle, rows []outbox.Message) {
	t.Helper()
	pools = databasetest.Pools(t, databasetest.URL(t, database.MySQL, "youngoutbox"), 2)
	first, second = setup(t, pools[0]), setup(t, pools[1])
	aggregates := make([]int64, 100)
	for i := range aggregates {
		aggregates[i] = int64(i + 1)
	}
	return pools, first, second, first.append(t, time.Now().Add(-time.Hour), aggregates...)
}
