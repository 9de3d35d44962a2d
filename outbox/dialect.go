package outbox

import (
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/database"
)

// dialect is what the Store says differently on each database, one
// implementation per file (dialect_mysql.go, dialect_postgres.go,
// dialect_sqlite.go). The
// statements stay the Store's; a dialect supplies the parts that differ, so
// a new database is one more file and one more case in dialectFor.
type dialect interface {
	// lockForClaim returns q, the read by primary key that re-checks a
	// claim's candidates inside its transaction, made to lock the rows it
	// returns until the transaction ends, without waiting for rows another
	// claimer holds where the database can skip them.
	lockForClaim(q *gorm.DB) *gorm.DB
	// versionMatch is the set-based optimistic lock over msgs: "this row
	// still has the version I hold", for every (id, version) of msgs, as a
	// condition the database resolves by primary key.
	versionMatch(msgs []Message) clause.Expr
	// claimReturning, where the database can, claims the rows of ids that
	// are still due (status PENDING, or RETRY with next_attempt_at <= now)
	// and not locked by another claimer, in one statement that locks,
	// updates and returns them as claimed (status PROCESSING, version
	// bumped); ok is false where it cannot, and claimRows then locks, reads
	// and updates in two statements.
	claimReturning(tx *gorm.DB, ids []int64, owner string, now time.Time) (rows []Message, ok bool, err error)
	// defersAcksToNextClaim is Store.DefersAcksToNextClaim.
	defersAcksToNextClaim() bool
}

// dialectFor returns the statements of d. Every database.Open dialect has
// one, so a missing one is a programming error.
func dialectFor(d database.Dialect) dialect {
	switch d {
	case database.MySQL:
		return mysqlDialect{}
	case database.PostgreSQL:
		return postgresDialect{}
	case database.SQLite:
		return sqliteDialect{}
	default:
		panic(fmt.Sprintf("outbox: no statements for database dialect %q", d))
	}
}

// writeVersionPairs writes "(?,?),(?,?),..." to b, one row constructor per
// message, and returns args with the (id, version) of each appended.
func writeVersionPairs(b *strings.Builder, msgs []Message, args []any) []any {
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?,?)")
		args = append(args, m.ID, m.Version)
	}
	return args
}

// returningColumns is the RETURNING list of a claim: Message's columns by
// name, not *. PostgreSQL's driver caches each statement's plan per
// connection, and a cached RETURNING * fails with "cached plan must not
// change result type" once a migration (a rolling upgrade) adds a column.
func returningColumns(tx *gorm.DB) (string, error) {
	stmt := &gorm.Statement{DB: tx}
	if err := stmt.Parse(&Message{}); err != nil {
		return "", fmt.Errorf("outbox columns: %w", err)
	}
	cols := make([]string, len(stmt.Schema.DBNames))
	for i, name := range stmt.Schema.DBNames {
		cols[i] = stmt.Quote(name)
	}
	return strings.Join(cols, ", "), nil
}

// updateReturning is claimReturning's statement, the same on every
// database that has RETURNING: it claims the rows that where picks and
// returns them in full. where has four placeholders: ids (in the dialect's
// form of a list), then PENDING, RETRY and now for "due".
func updateReturning(tx *gorm.DB, where string, ids any, owner string, now time.Time) ([]Message, bool, error) {
	cols, err := returningColumns(tx)
	if err != nil {
		return nil, true, err
	}
	var rows []Message
	err = tx.Raw(`UPDATE outbox SET status = ?, version = version + 1, claimed_by = ?, claimed_at = ?
WHERE `+where+`
RETURNING `+cols, StatusProcessing, owner, now, ids, StatusPending, StatusRetry, now).Scan(&rows).Error
	return rows, true, err
}

// lockSkipLocked makes q read FOR UPDATE SKIP LOCKED: concurrent claimers
// skip each other's rows instead of waiting (MySQL 8.0.1+, MariaDB 10.6+,
// PostgreSQL).
func lockSkipLocked(q *gorm.DB) *gorm.DB {
	return q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
}

// rowValueIn is "(id, version) IN ((?,?),...)" over msgs, a row-value IN
// over a list of row constructors, which MySQL and PostgreSQL resolve by
// primary key.
func rowValueIn(msgs []Message) clause.Expr {
	var b strings.Builder
	b.WriteString("(id, version) IN (")
	args := writeVersionPairs(&b, msgs, make([]any, 0, 2*len(msgs)))
	b.WriteString(")")
	return clause.Expr{SQL: b.String(), Vars: args}
}
