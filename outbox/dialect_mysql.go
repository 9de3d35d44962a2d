package outbox

import (
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// mysqlDialect is the Store's dialect on MySQL and MariaDB.
type mysqlDialect struct{}

// lockForClaim reads FOR UPDATE SKIP LOCKED: concurrent claimers skip each
// other's rows instead of waiting (MariaDB 10.6+, MySQL 8.0.1+).
func (mysqlDialect) lockForClaim(q *gorm.DB) *gorm.DB { return lockSkipLocked(q) }

// versionMatch is a row-value IN over a list of row constructors, which
// MySQL resolves by primary key.
func (mysqlDialect) versionMatch(msgs []Message) clause.Expr { return rowValueIn(msgs) }

// defersAcksToNextClaim is true: on MySQL writing a full batch's
// acknowledgements with the next claim saves a durable commit and two round
// trips per batch.
func (mysqlDialect) defersAcksToNextClaim() bool { return true }

// claimReturning is not available: claimRows locks, reads and updates.
func (mysqlDialect) claimReturning(*gorm.DB, []int64, string, time.Time) ([]Message, bool, error) {
	return nil, false, nil
}
