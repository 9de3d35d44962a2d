package database

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Driver is everything the service does differently on one database: the
// one place a dialect's SQL, locks, clock, notifications and errors live.
// Code outside this package asks a Driver (DB.Driver, DriverOf) instead of
// comparing dialects, so a new database is a new Driver, its migrations,
// and a pass of internal/storage/database/drivertest, the suite that checks every method on
// a real server.
//
// Each implementation sits in the file of its database, with the parsing of
// its URL and its opening (mysql.go, postgres.go, sqlite.go).
type Driver interface {
	// Dialect names the database the driver speaks.
	Dialect() Dialect
	// DefaultPort is the TCP port of the database's server when its URL
	// names none; "" for a database kept in a file.
	DefaultPort() string
	// DefaultMaxConns is the pool a DB keeps when Pool.MaxConns is 0.
	DefaultMaxConns() int

	// Now reads the database's clock through db, a pool or a transaction
	// (see Now): UTC, at most microsecond precision, the time of the
	// reading even inside a transaction.
	Now(ctx context.Context, db *gorm.DB) (time.Time, error)
	// NowExpr is the same clock as a value of a statement (see NowExpr).
	NowExpr() clause.Expr

	// SingleWriter reports whether write transactions take turns on the
	// whole database from their BEGIN (SQLite: BEGIN IMMEDIATE), instead
	// of locking the rows they touch. Then a locking read needs no clause,
	// and no other transaction writes between a read and a write.
	SingleWriter() bool
	// ReadCommitted returns the options that begin a transaction at READ
	// COMMITTED where the database's default isolation is stronger
	// (MySQL and MariaDB: REPEATABLE READ), and nil where READ COMMITTED
	// is the default (PostgreSQL) or writers take turns (SQLite).
	ReadCommitted() *sql.TxOptions
	// ForUpdate makes q, a read inside a transaction, lock the rows it
	// returns until the transaction ends: a concurrent ForUpdate of them
	// waits, then reads them as committed. On a SingleWriter database q
	// is returned as it is.
	ForUpdate(q *gorm.DB) *gorm.DB
	// ForUpdateSkipLocked is ForUpdate that passes over the rows another
	// transaction holds instead of waiting for them (FOR UPDATE SKIP
	// LOCKED): concurrent claimers take disjoint rows.
	ForUpdateSkipLocked(q *gorm.DB) *gorm.DB
	// ThroughIndex is the reference to table, for a statement's FROM or
	// UPDATE, that makes the database read it through index where it takes
	// such a hint (MySQL's "table FORCE INDEX (index)"), and table
	// elsewhere. MariaDB may read a locking statement's range by the
	// index's first column alone, or scan the whole table, and under
	// REPEATABLE READ it keeps a lock on every row it passes, rows the
	// statement does not return or change: a concurrent SKIP LOCKED read
	// then passes them over, and a concurrent UPDATE waits for them.
	// Forced, it reads only the range the conditions bound. PostgreSQL
	// locks only the rows a statement returns or changes, and SQLite's
	// one writer locks no row.
	ThroughIndex(table, index string) string

	// InsertIgnore makes q's Create skip each row whose primary or unique
	// key is taken, without an error: such a row is not written. For a
	// model with no column the database generates, it is not counted in
	// RowsAffected either; GORM reads a generated key back on MariaDB
	// (RETURNING), and counts the rows read back, skipped ones included.
	InsertIgnore(q *gorm.DB) *gorm.DB
	// InsertIgnoreLocks reports whether InsertIgnore's statement leaves the
	// rows it skipped locked until the transaction ends (MySQL's ON
	// DUPLICATE KEY UPDATE, SQLite's one writer). Where it does not
	// (PostgreSQL's ON CONFLICT DO NOTHING), a read that must keep them
	// still adds ForUpdate.
	InsertIgnoreLocks() bool
	// KeyInsert returns the INSERT of one row of table into columns, whose
	// key column the database generates, and that yields the new key. The
	// names come quoted (gorm.Statement.Quote). It runs straight on a
	// connection, without GORM's callbacks.
	KeyInsert(table, key string, columns []string) KeyInsert
	// UpdateReturning reports whether an UPDATE can return the rows it
	// changed (UPDATE ... RETURNING). Where it cannot (MySQL, MariaDB), an
	// UPDATE ... RETURNING fails.
	UpdateReturning() bool

	// BigIntType is the type to CAST a parameter to for a 64-bit integer,
	// where the database would otherwise guess its type (a CASE of
	// parameters is text on PostgreSQL): SIGNED on MySQL, BIGINT elsewhere.
	BigIntType() string
	// KeysIn is "column IN keys" in the form the database resolves fastest
	// for a long list: one array parameter on PostgreSQL, one placeholder
	// per key elsewhere. keys must not be empty.
	KeysIn(column string, keys []int64) clause.Expr
	// PairsIn is "(first, second) IN pairs", resolved by first, a key:
	// the set-based check that each row still has the second value a
	// caller holds (such as a version). pairs must not be empty.
	PairsIn(first, second string, pairs []Pair) clause.Expr
	// After is the keyset condition "(first, second) > (a, b)" of a page or
	// batch that goes on after the row (a, b), in the form the database
	// reads as a range of an index that ends in (first, second): a row value
	// on PostgreSQL, which otherwise scans from the start of first = a
	// through every entry before the cursor, dead ones included; spelled
	// out elsewhere (first > a OR (first = a AND second > b)), as MySQL
	// uses no index for a row value's inequality.
	After(first, second string, a, b any) clause.Expr

	// Notifies reports whether the database carries notifications: a
	// Notify reaches the sessions that LISTEN on its channel, through
	// DB.ConnectPostgres.
	Notifies() bool
	// Notify sends payload on channel through db, a pool, as its own
	// statement; an empty payload is a plain NOTIFY. Where the database
	// has no notifications it does nothing and returns nil.
	Notify(db *gorm.DB, channel, payload string) error

	// Settle brings tables just written or deleted in bulk to the state a
	// steady service keeps them in, through db, a pool: on PostgreSQL
	// VACUUM (ANALYZE), which frees the index entries of deleted rows (scans
	// and plans otherwise walk through them) and makes the planner's
	// statistics current (it otherwise plans for the table as it was) before
	// autovacuum would come by; nothing on MySQL (see AwaitPurge for its
	// purge of deleted rows) and SQLite. It runs outside any transaction.
	Settle(db *gorm.DB, tables ...string) error
	// AwaitPurge waits, through db, for the database's background removal
	// of rows deleted before the call, whose work the next writer would
	// otherwise share: on MySQL InnoDB's purge (bounded; see
	// mysqlDriver.AwaitPurge); nothing on PostgreSQL, whose dead rows are
	// Settle's, and SQLite, which purges nothing in the background.
	AwaitPurge(db *gorm.DB) error
	// RefreshStatistics takes the planner's statistics again of those of
	// tables that changed much since they were last taken, through db, a
	// pool, and returns their names. On PostgreSQL that is ANALYZE of each
	// table whose rows inserted, updated or deleted since then are at least
	// StaleRows and at least StaleShare of the rows it held then, and that
	// the user may analyze (its owner, or a superuser). Autovacuum does the
	// same, but looks once a minute (autovacuum_naptime) and waits for a
	// tenth of a table; a spike turns a table over in seconds, and the
	// planner meanwhile plans for the table as it was (a status it counted
	// rare read through its index, a batch of ids filtered out of it). A
	// table whose lock another VACUUM or ANALYZE holds is left to the next
	// call. MySQL and MariaDB (InnoDB takes a table's statistics again in
	// the background once a tenth of it changed) and SQLite (no statistics
	// are kept; its planner reads a list of keys by key) return nothing.
	RefreshStatistics(db *gorm.DB, tables ...string) ([]string, error)

	// IsRetryable reports whether err, from this database, is a transient
	// conflict after which the same transaction may succeed when run
	// again: a deadlock, a lock wait that timed out, a serialization
	// failure, a busy file (see Transaction).
	IsRetryable(err error) bool
	// IsDuplicateKey reports whether err, from this database, whether GORM
	// translated it (gorm.ErrDuplicatedKey) or not, says that a row's
	// primary or unique key is taken.
	IsDuplicateKey(err error) bool
	// Explain returns err with what the operator should do about it when
	// its cause is theirs to fix (a database not created yet), and err
	// otherwise; database is the database's name on its server, if it has
	// one (see DB.Explain).
	Explain(err error, database string) error
}

// Pair is one (first, second) value of Driver.PairsIn, such as a row's id
// and version.
type Pair struct{ First, Second int64 }

// KeyInsert is the INSERT of one row that yields the key the database gave
// it (Driver.KeyInsert).
type KeyInsert struct {
	// SQL is the statement; its placeholders take the columns' values in
	// their order.
	SQL string
	// returning: the key comes back as a row (INSERT ... RETURNING), where
	// the driver has no LastInsertId; else it is the result's LastInsertId.
	returning bool
}

// Exec runs the insert on conn (a pool, or a transaction's
// Statement.ConnPool) with args, the columns' values in order, and returns
// the new row's key.
func (ins KeyInsert) Exec(ctx context.Context, conn gorm.ConnPool, args ...any) (int64, error) {
	if ins.returning {
		var id int64
		err := conn.QueryRowContext(ctx, ins.SQL, args...).Scan(&id)
		return id, err
	}
	res, err := conn.ExecContext(ctx, ins.SQL, args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// keyInsert builds a KeyInsert: mark(i) is the placeholder of the i-th
// column (from 1); returning adds RETURNING key.
func keyInsert(table, key string, columns []string, mark func(i int) string, returning bool) KeyInsert {
	marks := make([]string, len(columns))
	for i := range columns {
		marks[i] = mark(i + 1)
	}
	q := "INSERT INTO " + table + " (" + strings.Join(columns, ",") + ") VALUES (" + strings.Join(marks, ",") + ")"
	if returning {
		q += " RETURNING " + key
	}
	return KeyInsert{SQL: q, returning: returning}
}

// questionMark is the placeholder of MySQL and SQLite.
func questionMark(int) string { return "?" }

// DriverOf returns the driver of db, a pool or a transaction: what a
// function that takes a *gorm.DB asks. Every database Open returns has
// one; a *gorm.DB opened otherwise on a database the package does not know
// panics.
func DriverOf(db *gorm.DB) Driver { return mustDriver(DialectOf(db)) }

// Driver returns the driver of db's dialect.
func (db *DB) Driver() Driver { return mustDriver(db.Dialect) }

func mustDriver(d Dialect) Driver {
	drv := driverFor(d)
	if drv == nil {
		panic(fmt.Sprintf("database: no driver for dialect %q", d))
	}
	return drv
}

// driverFor returns the driver of d, nil for a dialect the package does not
// know.
func driverFor(d Dialect) Driver { return drivers()[d] }

// drivers maps every Dialect to its driver: the one list a new database is
// added to.
func drivers() map[Dialect]Driver {
	return map[Dialect]Driver{MySQL: mysqlDriver{}, PostgreSQL: postgresDriver{}, SQLite: sqliteDriver{}}
}

// forUpdate is the locking read of MySQL and PostgreSQL.
func forUpdate(q *gorm.DB) *gorm.DB {
	return q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
}

// forUpdateSkipLocked is the skipping locking read of MySQL 8.0.1+, MariaDB
// 10.6+ and PostgreSQL.
func forUpdateSkipLocked(q *gorm.DB) *gorm.DB {
	return q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked})
}

// insertIgnore is GORM's OnConflict DoNothing, which each dialector writes
// in its database's form.
func insertIgnore(q *gorm.DB) *gorm.DB { return q.Clauses(clause.OnConflict{DoNothing: true}) }

// keysInList is "column IN (?,?,...)", one placeholder per key.
func keysInList(column string, keys []int64) clause.Expr {
	return clause.Expr{SQL: column + " IN ?", Vars: []any{keys}}
}

// writePairs writes "(?,?),(?,?),..." to b, one row constructor per pair,
// and returns args with each pair's values appended.
func writePairs(b *strings.Builder, pairs []Pair, args []any) []any {
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?,?)")
		args = append(args, p.First, p.Second)
	}
	return args
}
