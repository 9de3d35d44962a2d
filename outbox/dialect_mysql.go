package outbox

import (
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// mysqlDialect is the Store's dialect on MySQL and MariaDB.
type mysqlDialect struct{}

// lockForClaim reads FOR UPDATE SKIP LOCKED: concurrent claimers skip each
// other's rows instead of waiting (MariaDB 10.6+, MySQL 8.0.1+).
func (mysqlDialect) lockForClaim(q *gorm.DB) *gorm.DB {
	return q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
}

// versionMatch is a row-value IN over a list of row constructors, which
// MySQL resolves by primary key.
func (mysqlDialect) versionMatch(msgs []Message) clause.Expr {
	var b strings.Builder
	b.WriteString("(id, version) IN (")
	args := writeVersionPairs(&b, msgs, make([]any, 0, 2*len(msgs)))
	b.WriteString(")")
	return clause.Expr{SQL: b.String(), Vars: args}
}

// defersAcksToNextClaim is true: on MySQL writing a full batch's
// acknowledgements with the next claim saves a durable commit and two round
// trips per batch.
func (mysqlDialect) defersAcksToNextClaim() bool { return true }

// announce does nothing: relays find new rows by polling.
func (mysqlDialect) announce(*gorm.DB) error { return nil }
