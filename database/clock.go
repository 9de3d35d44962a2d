package database

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
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
// On MySQL it is CURRENT_TIMESTAMP(6) of the server; on SQLite, whose
// "server" is the process that opens the file, it is the host's clock read
// by SQLite itself (millisecond precision), which every process on the file
// shares.
func Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	db = db.WithContext(ctx)
	switch name := db.Dialector.Name(); name {
	case "mysql":
		var t time.Time
		if err := db.Raw("SELECT CURRENT_TIMESTAMP(6)").Scan(&t).Error; err != nil {
			return time.Time{}, fmt.Errorf("read the database clock: %w", err)
		}
		return t.UTC().Truncate(time.Microsecond), nil
	case "sqlite":
		var s string
		if err := db.Raw("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&s).Error; err != nil {
			return time.Time{}, fmt.Errorf("read the database clock: %w", err)
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, time.UTC)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the database clock: %q: %w", s, err)
		}
		return t, nil
	default:
		return time.Time{}, fmt.Errorf("read the database clock: unknown dialect %q", name)
	}
}

// Normalize returns t as the database keeps it: UTC, microsecond precision.
// Every time written to the database goes through it, so values read back
// compare equal to the ones written, on MySQL and SQLite alike.
func Normalize(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
