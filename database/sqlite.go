package database

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// sqliteBusyWait bounds how long opening a SQLite file waits for another
// process that holds it (creating it, switching it to WAL, migrating).
const sqliteBusyWait = 30 * time.Second

// SQLitePath returns the file of a sqlite:// URL: sqlite://relative/path.db
// (relative to the working directory) or sqlite:///abs/path.db.
func SQLitePath(u *url.URL) (string, error) {
	// sqlite://relative/path.db keeps the host as the first path element;
	// sqlite:///abs/path.db has an empty host.
	path := u.Host + u.Path
	if u.Opaque != "" {
		path = u.Opaque
	}
	if path == "" {
		return "", fmt.Errorf("%w: sqlite URL without a path (want sqlite://path/to.db)", ErrInvalidURL)
	}
	return path, nil
}

func openSQLite(path string, create bool) (*DB, error) {
	if !create {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			shown := path
			if abs, err := filepath.Abs(path); err == nil {
				shown = abs
			}
			return nil, fmt.Errorf("%w at %s; run from the folder of `posting serve` or set --database-url / POSTING_DATABASE_URL",
				ErrNoDatabase, shown)
		}
	} else if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create sqlite dir: %w", err)
		}
	}
	// Immediate transactions take the write lock at BEGIN, so two writers
	// queue on busy_timeout instead of one failing with SQLITE_BUSY when it
	// upgrades a read lock. busy_timeout comes first: the pragmas after it
	// and the first statements then wait for a process that holds the file.
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(10000)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_pragma=foreign_keys(1)"
	if !create {
		// Even if the file disappears after the check above, SQLite must
		// not create it.
		dsn += "&mode=rw"
	}
	g, err := gorm.Open(sqlite.Open(dsn), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	sqlDB, err := g.DB()
	if err != nil {
		return nil, err
	}
	// SQLite has one writer; a few connections serve readers under WAL.
	sqlDB.SetMaxOpenConns(4)
	sqlDB.SetConnMaxIdleTime(0)
	if err := enableWAL(sqlDB, sqliteBusyWait); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return &DB{DB: g, Dialect: SQLite, Location: "sqlite://" + path}, nil
}

// enableWAL switches the file to WAL, which lets readers run beside the one
// writer. The mode is stored in the file, so it is set once here rather than
// by every new connection. Switching needs the file to itself: while
// another process holds it (creating or migrating a fresh file, starting
// at the same moment) SQLite answers busy, or keeps the old mode, without
// waiting on busy_timeout; so this asks again until wait runs out.
func enableWAL(db *sql.DB, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		var mode string
		err := db.QueryRow("PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil && (strings.EqualFold(mode, "wal") || strings.EqualFold(mode, "memory")) {
			return nil // an in-memory database has no WAL and needs none
		}
		if err != nil && !IsRetryable(err) {
			return fmt.Errorf("switch to WAL: %w", err)
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("journal mode is still %q", mode)
			}
			return fmt.Errorf("switch to WAL: the file stayed busy for %s: %w", wait, err)
		}
		time.Sleep(pause)
	}
}

// sqliteDialect is what the package does on SQLite.
type sqliteDialect struct{}

// now reads the host's clock through SQLite ('now', millisecond precision).
func (sqliteDialect) now(db *gorm.DB) (time.Time, error) {
	var s string
	if err := db.Raw("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&s).Error; err != nil {
		return time.Time{}, err
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: %w", s, err)
	}
	return t, nil
}

// nowExpr is the host's clock, the one SQLite's 'now' reads, as a
// parameter: written like every other time, so it compares with the
// stored ones (SQLite keeps times as text).
func (sqliteDialect) nowExpr() clause.Expr {
	return clause.Expr{SQL: "?", Vars: []any{Normalize(time.Now())}}
}

// isRetryable: SQLITE_BUSY or SQLITE_LOCKED, which the driver reports only
// in its text.
func (sqliteDialect) isRetryable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked") ||
		strings.Contains(msg, "SQLITE_LOCKED")
}

// explain returns err: opening a SQLite file explains a missing one itself.
func (sqliteDialect) explain(err error, _ string) error { return err }
