package outbox

import (
	"time"

	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// sqliteDialect is the Store's dialect on SQLite.
type sqliteDialect struct{}

// lockForClaim returns q as it is: SQLite transactions are serialized by
// BEGIN IMMEDIATE (see database.Open), so the claim's transaction already
// holds the one write lock when it reads.
func (sqliteDialect) lockForClaim(q *gorm.DB) *gorm.DB { return q }

// versionMatch takes the row-value list as a VALUES subquery, as SQLite
// wants it, and the plain id list too, so that SQLite looks the rows up by
// key instead of scanning.
func (sqliteDialect) versionMatch(msgs []Message) clause.Expr {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	var b strings.Builder
	b.WriteString("id IN ? AND (id, version) IN (VALUES ")
	args := writeVersionPairs(&b, msgs, append(make([]any, 0, 2*len(msgs)+1), ids))
	b.WriteString(")")
	return clause.Expr{SQL: b.String(), Vars: args}
}

// defersAcksToNextClaim is false: a commit in WAL mode is cheap, and every
// write transaction takes the one write lock, so a relay that went straight
// from one batch's send to its next claim would hold that lock back to back
// and starve the other instances on the file.
func (sqliteDialect) defersAcksToNextClaim() bool { return false }

// claimReturning updates the due candidates and returns them in one
// statement (SQLite 3.35+): the transaction holds the file's write lock
// since BEGIN IMMEDIATE, so no other claimer can take them in between, and
// the separate read of the full rows is saved.
func (sqliteDialect) claimReturning(tx *gorm.DB, ids []int64, owner string, now time.Time) ([]Message, bool, error) {
	return updateReturning(tx, "id IN ? AND (status = ? OR (status = ? AND next_attempt_at <= ?))", ids, owner, now)
}
