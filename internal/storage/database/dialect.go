package database

import "gorm.io/gorm"

// Dialect names the SQL dialect a database speaks: "mysql", "postgres" or
// "sqlite". It
// is also the name of the GORM dialector that speaks it, and of the folder of
// the dialect's migrations. What differs between dialects is its Driver's.
type Dialect string

// The dialects the service runs on.
const (
	MySQL      Dialect = "mysql"
	PostgreSQL Dialect = "postgres"
	SQLite     Dialect = "sqlite"
)

// DialectOf returns the dialect of db, a pool or a transaction. Code that
// would branch on it asks DriverOf(db) instead.
func DialectOf(db *gorm.DB) Dialect { return Dialect(db.Dialector.Name()) }
