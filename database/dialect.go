package database

import "gorm.io/gorm"

// Dialect names the SQL dialect a database speaks: "mysql" or "sqlite". It
// is also the name of the GORM dialector that speaks it, and of the folder of
// the dialect's migrations.
type Dialect string

// The dialects the service runs on.
const (
	MySQL  Dialect = "mysql"
	SQLite Dialect = "sqlite"
)

// DialectOf returns the dialect of db, a pool or a transaction: what a
// function that takes a *gorm.DB branches on.
func DialectOf(db *gorm.DB) Dialect { return Dialect(db.Dialector.Name()) }
