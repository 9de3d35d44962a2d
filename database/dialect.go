package database

import (
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Dialect names the SQL dialect a database speaks: "mysql", "postgres" or
// "sqlite". It
// is also the name of the GORM dialector that speaks it, and of the folder of
// the dialect's migrations.
type Dialect string

// The dialects the service runs on.
const (
	MySQL      Dialect = "mysql"
	PostgreSQL Dialect = "postgres"
	SQLite     Dialect = "sqlite"
)

// DialectOf returns the dialect of db, a pool or a transaction: what a
// function that takes a *gorm.DB branches on.
func DialectOf(db *gorm.DB) Dialect { return Dialect(db.Dialector.Name()) }

// dialect is what this package does differently per database, one
// implementation per file with the database's URL parsing and opening
// (mysql.go, postgres.go, sqlite.go). A new database is one more file, one more entry in
// dialects and one more URL scheme in open.
type dialect interface {
	// now reads the database's clock through db (see Now).
	now(db *gorm.DB) (time.Time, error)
	// nowExpr is the same clock as a value inside a statement (see NowExpr).
	nowExpr() clause.Expr
	// isRetryable reports whether err, if it comes from this database's
	// driver, is a transient lock conflict (see IsRetryable).
	isRetryable(err error) bool
	// explain returns err with what the operator should do about it when
	// its cause is theirs to fix, and err otherwise; name is the database's
	// name on its server, if it has one.
	explain(err error, name string) error
}

// dialectFor returns the implementation of d, nil for a dialect the package
// does not know.
func dialectFor(d Dialect) dialect { return dialects()[d] }

// dialects maps every Dialect to its implementation: the one list a new
// database is added to.
func dialects() map[Dialect]dialect {
	return map[Dialect]dialect{MySQL: mysqlDialect{}, PostgreSQL: postgresDialect{}, SQLite: sqliteDialect{}}
}
