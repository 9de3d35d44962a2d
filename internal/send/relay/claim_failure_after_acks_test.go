package relay

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

var errStatementTimeout = errors.New("ERROR: canceling statement due to statement timeout (SQLSTATE 57014)")

// failNthClaimStatement fails the nth claim-window statement on db (the
// PostgreSQL read-and-claim of a window), counting from 1.
func failNthClaimStatement(t *testing.T, db *gorm.DB, n int32) *atomic.Int32 {
	var seen atomic.Int32
	databasetest.Fail(t, db, databasetest.StmtRow, errStatementTimeout, func(tx *gorm.DB) bool {
		if !strings.Contains(tx.Statement.SQL.String(), "WITH k AS MATERIALIZED") {
			return false
		}
		return seen.Add(1) == n
	})
	return &seen
}

func requireNoneProcessing(t *testing.T, b *bundle) {
	t.Helper()
	var n int64
	require.NoError(t, b.db.Model(&outbox.Message{}).Where("status = ?", outbox.StatusProcessing).Count(&n).Error)
	require.Zero(t, n, "rows left PROCESSING")
}

// relayOnPostgres is a relay "a" with batch size batch on a PostgreSQL
// bundle holding one event of each of aggregates, in order.
func relayOnPostgres(t *testing.T, batch int, aggregates ...int64) (*database.DB, *bundle, []outbox.Message, *Relay) {
	t.Helper()
	db := databasetest.New(t, database.PostgreSQL)
	b := setup(t, db)
	rows := b.append(t, aggregates...)
	return db, b, rows, b.relay(t, "a", func(c *Config) { c.BatchSize = batch })
}

// requireSentOnce checks that rows went to the broker once each, in
// per-post order, and that none is left PROCESSING.
func requireSentOnce(t *testing.T, b *bundle, rows []outbox.Message) {
	t.Helper()
	requireOrderedOnce(t, rows, b.send.SentIDs())
	require.Len(t, b.send.SentIDs(), len(rows))
	requireNoneProcessing(t, b)
}

// On PostgreSQL the deferred acknowledgements are written by their own
// statement before the claim; when the claim statement then fails, the
// acknowledgements stay written. The relay must end with every row SENT
// exactly once, in per-post order, counted as sent once (not fenced, not
// lost), with nothing left PROCESSING.
func TestClaimFailingAfterItsAcknowledgementsSendsEachRowOnce(t *testing.T) {
	t.Parallel()
	db, b, rows, r := relayOnPostgres(t, 2, 1, 2, 1, 2, 3, 3)
	ctx := context.Background()
	require.True(t, b.store.DefersAcksToNextClaim())
	failNthClaimStatement(t, db.DB, 2) // the claim carrying the first batch's acknowledgements

	var total Result
	var errs int
	for range 10 {
		res, err := r.RunOnce(ctx)
		if err != nil {
			require.ErrorIs(t, err, errStatementTimeout)
			errs++
		}
		total.Sent += res.Sent
		total.Fenced += res.Fenced
	}
	res, err := r.Flush(ctx)
	require.NoError(t, err)
	total.Sent += res.Sent
	total.Fenced += res.Fenced

	require.Equal(t, 1, errs)
	requireSentOnce(t, b, rows)
	b.requireStatus(t, rows, outbox.StatusSent, "")
	require.Zero(t, total.Fenced, "no other instance took a claim")
	require.Equal(t, len(rows), total.Sent, "every acknowledged row counted as sent once")
}

// The same failure, then the relay is gone without another poll (a
// restart): a new relay on the same store sends what is left, each row
// once, and no row of the failed relay is left PROCESSING once the old
// relay has flushed.
func TestRelayRestartedAfterAClaimFailedPastItsAcknowledgementsSendsEachRowOnce(t *testing.T) {
	t.Parallel()
	db, b, rows, r := relayOnPostgres(t, 2, 1, 2, 1, 2, 3, 3)
	ctx := context.Background()
	failNthClaimStatement(t, db.DB, 2)

	_, err := r.RunOnce(ctx)
	require.NoError(t, err)
	_, err = r.RunOnce(ctx)
	require.ErrorIs(t, err, errStatementTimeout)
	_, err = r.Flush(ctx) // a graceful stop
	require.NoError(t, err)
	requireNoneProcessing(t, b)

	r2 := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })
	for range 10 {
		_, err := r2.RunOnce(ctx)
		require.NoError(t, err)
	}
	_, err = r2.Flush(ctx)
	require.NoError(t, err)
	requireSentOnce(t, b, rows)
	b.requireStatus(t, rows, outbox.StatusSent, "")
}

// A claim whose first window took rows and whose second window's statement
// failed: the first window's rows are PROCESSING under the relay with no
// answer. The relay releases them at its next poll (no attempt spent) and
// sends every row once; none is left PROCESSING.
func TestClaimFailingInItsSecondWindowReleasesTheFirstWindowsRows(t *testing.T) {
	t.Parallel()
	db, b, rows, r := relayOnPostgres(t, 3, 1, 2, 3, 4, 5, 6)
	ctx := context.Background()
	seen := failNthClaimStatement(t, db.DB, 2)

	// Another claimer's statement holds row 1: the first window (1..3)
	// takes 2 and 3, the second window's statement fails.
	tx := db.Begin()
	require.NoError(t, tx.Exec("SELECT id FROM outbox WHERE id = ? FOR UPDATE", rows[0].ID).Error)
	_, err := r.RunOnce(ctx)
	require.ErrorIs(t, err, errStatementTimeout)
	require.EqualValues(t, 2, seen.Load())
	require.NoError(t, tx.Rollback().Error)
	for _, m := range rows[1:3] {
		got := b.row(t, m.ID)
		require.Equal(t, outbox.StatusProcessing, got.Status, "the first window's claim was committed")
		require.Equal(t, r.Owner(), *got.ClaimedBy)
	}

	var total Result
	for range 10 {
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		total.Sent += res.Sent
		total.Fenced += res.Fenced
		total.Released += res.Released
		total.Lost += res.Lost
	}
	res, err := r.Flush(ctx)
	require.NoError(t, err)
	total.Sent += res.Sent
	total.Fenced += res.Fenced

	require.Equal(t, 2, total.Lost, "the first window's rows were read back")
	requireSentOnce(t, b, rows)
	b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
	require.Zero(t, total.Fenced)
	require.Equal(t, len(rows), total.Sent)
}
