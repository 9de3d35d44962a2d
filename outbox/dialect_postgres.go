package outbox

import (
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// postgresDialect is the Store's dialect on PostgreSQL.
type postgresDialect struct{}

// lockForClaim reads FOR UPDATE SKIP LOCKED: concurrent claimers skip each
// other's rows instead of waiting. Under READ COMMITTED the locking read
// sees the latest committed version of each row, so the re-check of the
// status in claimRows is against what other claimers wrote.
func (postgresDialect) lockForClaim(q *gorm.DB) *gorm.DB { return lockSkipLocked(q) }

// versionMatch is a row-value IN over a list of row constructors, as on
// MySQL; PostgreSQL resolves it by primary key.
func (postgresDialect) versionMatch(msgs []Message) clause.Expr { return rowValueIn(msgs) }

// defersAcksToNextClaim is true, by measurement: BenchmarkRelay on
// PostgreSQL 15 here (10,000 events, one relay, the table analyzed) moved
// 9,500-10,300 events/s at batch 100 with the SENT write folded into the next
// claim against 7,300-8,000 with it written at once, and the same 11-14k at
// batch 500 and 1000 either way: the saved commit (a WAL flush) shows where
// batches are small. Unlike SQLite, PostgreSQL's row locks let other relays
// claim meanwhile.
func (postgresDialect) defersAcksToNextClaim() bool { return true }

// claimReturning locks the due candidates FOR UPDATE SKIP LOCKED in a
// subquery and updates and returns them in the same statement: one round
// trip and one pass over the rows instead of a locking read of the full
// rows and then an UPDATE. Under READ COMMITTED the locking subquery
// re-checks each row's latest version, so a row another claimer took
// meanwhile is not due any more, and a row it holds is skipped.
func (postgresDialect) claimReturning(tx *gorm.DB, ids []int64, owner string, now time.Time) ([]Message, bool, error) {
	cols, err := returningColumns(tx)
	if err != nil {
		return nil, true, err
	}
	var rows []Message
	err = tx.Raw(`UPDATE outbox SET status = ?, version = version + 1, claimed_by = ?, claimed_at = ?
WHERE id IN (SELECT id FROM outbox
	WHERE id IN ? AND (status = ? OR (status = ? AND next_attempt_at <= ?))
	FOR UPDATE SKIP LOCKED)
RETURNING `+cols, StatusProcessing, owner, now, ids, StatusPending, StatusRetry, now).Scan(&rows).Error
	return rows, true, err
}

// announce runs NOTIFY on NotifyChannel. PostgreSQL delivers it when the
// transaction commits, and not at all if it rolls back, and folds the
// identical notifications of one transaction into one: a transaction that
// appends a hundred rows wakes each listening relay once.
func (postgresDialect) announce(tx *gorm.DB) error {
	return tx.Exec("NOTIFY " + NotifyChannel).Error
}
