package database

import (
	"database/sql"

	"github.com/postingsvc/posting/internal/platform/config"
)

// MaxPoolConns bounds Pool.MaxConns: far above what one process can use,
// low enough that a typo (an extra zero) is refused rather than felt by the
// server.
const MaxPoolConns = 1000

// DefaultMaxConns is the pool of a MySQL or PostgreSQL database: the API's
// 32 concurrent requests, the relay (a claim and a result write in flight
// at once), the scheduler, the cleaner, stale recovery and the embedded
// worker, with a few to spare. Fewer makes requests queue for a connection;
// a pool that keeps fewer idle than it opens closes and reopens connections
// under load.
const DefaultMaxConns = 40

// DefaultSQLiteMaxConns is the pool of a SQLite file: one writer at a time,
// a few readers beside it under WAL.
const DefaultSQLiteMaxConns = 4

// Pool is the size of a DB's connection pool.
type Pool struct {
	// MaxConns bounds the open connections. 0: DefaultMaxConns on MySQL
	// and PostgreSQL, DefaultSQLiteMaxConns on SQLite. 0..MaxPoolConns.
	MaxConns int
	// MaxIdle is how many connections stay open while idle. 0: MaxConns,
	// so a burst does not close what the next burst reopens. 0..MaxConns.
	MaxIdle int
}

// Validate refuses a pool out of its limits, naming the field.
func (p Pool) Validate() error {
	if p.MaxConns < 0 || p.MaxConns > MaxPoolConns {
		return config.Invalid("database.Pool.MaxConns", p.MaxConns, "must be 0 (the default) or 1..%d", MaxPoolConns)
	}
	if p.MaxIdle < 0 {
		return config.Invalid("database.Pool.MaxIdle", p.MaxIdle, "must be 0 (as many as the maximum) or more")
	}
	if p.MaxConns > 0 && p.MaxIdle > p.MaxConns {
		return config.Invalid("database.Pool.MaxIdle", p.MaxIdle, "must not exceed the maximum of open connections (%d)", p.MaxConns)
	}
	return nil
}

// withDefaults is p with its zero fields filled for driver d.
func (p Pool) withDefaults(d Driver) Pool {
	if p.MaxConns == 0 {
		p.MaxConns = d.DefaultMaxConns()
	}
	if p.MaxIdle == 0 || p.MaxIdle > p.MaxConns {
		p.MaxIdle = p.MaxConns
	}
	return p
}

// SetPool sizes db's pool to p, its zero fields filled for db's dialect,
// and returns the pool in force. An invalid p changes nothing.
func (db *DB) SetPool(p Pool) (Pool, error) {
	if err := p.Validate(); err != nil {
		return Pool{}, err
	}
	sqlDB, err := db.DB.DB()
	if err != nil {
		return Pool{}, err
	}
	p = p.withDefaults(db.Driver())
	// The maximum first: SetMaxIdleConns above the maximum in force would
	// be cut down to it.
	sqlDB.SetMaxOpenConns(p.MaxConns)
	sqlDB.SetMaxIdleConns(p.MaxIdle)
	return p, nil
}

// PoolStats reads db's pool counters.
func (db *DB) PoolStats() (sql.DBStats, error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return sql.DBStats{}, err
	}
	return sqlDB.Stats(), nil
}

// ConnectionsOpened is how many connections a pool has opened since it was
// created, from its stats: those open now plus those it closed as idle,
// idle too long or too old. A connection the driver dropped as broken is
// not counted (database/sql keeps no count of those), so this is a lower
// bound, exact while the server drops none.
func ConnectionsOpened(s sql.DBStats) int64 {
	return int64(s.OpenConnections) + s.MaxIdleClosed + s.MaxIdleTimeClosed + s.MaxLifetimeClosed
}
