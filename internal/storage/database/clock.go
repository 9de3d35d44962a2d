package database

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Now returns the database's current time, UTC with microsecond precision,
// as db (a pool or a transaction) reads it.
//
// Every time that one process writes and another compares (a claim's
// claimed_at against the stale cutoff, next_attempt_at against "due now",
// scheduledAt against "publish now", sent_at against the retention cutoff)
// comes from this one clock, so instances whose own clocks differ still
// agree on what is due and what is stale. An app's clock decides only what
// stays within the app: how long to wait, when to look again.
//
// On MySQL it is CURRENT_TIMESTAMP(6) of the server; on PostgreSQL
// clock_timestamp(), the time of the reading even inside a transaction
// (now() would be the transaction's start); on SQLite, whose
// "server" is the process that opens the file, it is the host's clock read
// by SQLite itself (millisecond precision), which every process on the file
// shares.
func Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	name := DialectOf(db)
	d := driverFor(name)
	if d == nil {
		return time.Time{}, fmt.Errorf("read the database clock: unknown dialect %q", name)
	}
	t, err := d.Now(ctx, db)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return t, nil
}

// NowExpr is Now as a value of a statement of db: the database's time when
// that statement runs, so that a conditional write decides by it without a
// read of the clock first. It is CURRENT_TIMESTAMP(6) on MySQL, one value
// for the statement, and clock_timestamp() on PostgreSQL, read again where
// the statement evaluates it, so that its rows may see times microseconds
// apart; on SQLite, whose clock is the host's, the host's time as a
// parameter.
func NowExpr(db *gorm.DB) clause.Expr {
	if d := driverFor(DialectOf(db)); d != nil {
		return d.NowExpr()
	}
	return clause.Expr{SQL: "?", Vars: []any{Normalize(time.Now())}}
}

// Normalize returns t as the database keeps it: UTC, microsecond precision.
// Every time written to the database goes through it, so values read back
// compare equal to the ones written, on MySQL and SQLite alike.
func Normalize(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// scanTime returns the time query reads through db, normalized: the now of
// a server whose driver scans a time.
func scanTime(ctx context.Context, db *gorm.DB, query string) (time.Time, error) {
	var t time.Time
	if err := db.WithContext(ctx).Raw(query).Scan(&t).Error; err != nil {
		return time.Time{}, err
	}
	return Normalize(t), nil
}
