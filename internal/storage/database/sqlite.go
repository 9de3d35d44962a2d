package database

import (
	"context"
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

// sqliteDriver is the Driver of SQLite.
type sqliteDriver struct{}

func (sqliteDriver) Dialect() Dialect { return SQLite }

// DefaultPort is "": SQLite is a file.
func (sqliteDriver) DefaultPort() string { return "" }

// DefaultMaxConns is DefaultSQLiteMaxConns: one writer at a time, a few
// readers beside it under WAL.
func (sqliteDriver) DefaultMaxConns() int { return DefaultSQLiteMaxConns }

// Now reads the host's clock through SQLite ('now', millisecond precision).
func (sqliteDriver) Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	var s string
	if err := db.WithContext(ctx).Raw("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").Scan(&s).Error; err != nil {
		return time.Time{}, err
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: %w", s, err)
	}
	return t, nil
}

// NowExpr is the host's clock, the one SQLite's 'now' reads, as a
// parameter: written like every other time, so it compares with the
// stored ones (SQLite keeps times as text).
func (sqliteDriver) NowExpr() clause.Expr {
	return clause.Expr{SQL: "?", Vars: []any{Normalize(time.Now())}}
}

// SingleWriter is true: every transaction begins IMMEDIATE (see openSQLite)
// and holds the file's one write lock until it ends.
func (sqliteDriver) SingleWriter() bool { return true }

// ReadCommitted is nil: writers take turns, and a reader sees the last
// commit when its transaction begins.
func (sqliteDriver) ReadCommitted() *sql.TxOptions { return nil }

// ForUpdate returns q: the transaction holds the write lock since BEGIN.
func (sqliteDriver) ForUpdate(q *gorm.DB) *gorm.DB { return q }

// ForUpdateSkipLocked returns q: no other writer holds a row meanwhile.
func (sqliteDriver) ForUpdateSkipLocked(q *gorm.DB) *gorm.DB { return q }

// ThroughIndex is table: a statement locks no row on SQLite.
func (sqliteDriver) ThroughIndex(table, _ string) string { return table }

// InsertIgnore is INSERT ... ON CONFLICT DO NOTHING.
func (sqliteDriver) InsertIgnore(q *gorm.DB) *gorm.DB { return insertIgnore(q) }

// InsertIgnoreLocks is true: the transaction holds the write lock.
func (sqliteDriver) InsertIgnoreLocks() bool { return true }

// KeyInsert takes the key from LastInsertId: ? placeholders.
func (sqliteDriver) KeyInsert(table, key string, columns []string) KeyInsert {
	return keyInsert(table, key, columns, questionMark, false)
}

// UpdateReturning is true (SQLite 3.35+).
func (sqliteDriver) UpdateReturning() bool { return true }

func (sqliteDriver) BigIntType() string { return "BIGINT" }

func (sqliteDriver) KeysIn(column string, keys []int64) clause.Expr { return keysInList(column, keys) }

// PairsIn takes the row-value list as a VALUES subquery, as SQLite wants
// it, and the plain list of firsts too, so that SQLite looks the rows up by
// key instead of scanning.
func (sqliteDriver) PairsIn(first, second string, pairs []Pair) clause.Expr {
	firsts := make([]int64, len(pairs))
	for i, p := range pairs {
		firsts[i] = p.First
	}
	var b strings.Builder
	b.WriteString(first + " IN ? AND (" + first + ", " + second + ") IN (VALUES ")
	args := writePairs(&b, pairs, append(make([]any, 0, 2*len(pairs)+1), firsts))
	b.WriteString(")")
	return clause.Expr{SQL: b.String(), Vars: args}
}

func (sqliteDriver) After(first, second string, a, b any) clause.Expr {
	return spelledAfter(first, second, a, b)
}

// Notifies is false: SQLite has no notifications.
func (sqliteDriver) Notifies() bool { return false }

func (sqliteDriver) Notify(*gorm.DB, string, string) error { return nil }

func (sqliteDriver) Settle(*gorm.DB, ...string) error { return nil }

func (sqliteDriver) AwaitPurge(*gorm.DB) error { return nil }

func (sqliteDriver) RefreshStatistics(*gorm.DB, ...string) ([]string, error) { return nil, nil }

// IsRetryable: SQLITE_BUSY or SQLITE_LOCKED, which the driver reports only
// in its text.
func (sqliteDriver) IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked") ||
		strings.Contains(msg, "SQLITE_LOCKED")
}

// The extended result codes of a taken key.
const (
	sqliteConstraintPrimaryKey = 1555
	sqliteConstraintUnique     = 2067
)

// IsDuplicateKey: SQLITE_CONSTRAINT_UNIQUE or SQLITE_CONSTRAINT_PRIMARYKEY.
func (sqliteDriver) IsDuplicateKey(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		if c := coded.Code(); c == sqliteConstraintUnique || c == sqliteConstraintPrimaryKey {
			return true
		}
	}
	return errors.Is(err, gorm.ErrDuplicatedKey)
}

// Explain returns err: opening a SQLite file explains a missing one itself.
func (sqliteDriver) Explain(err error, _ string) error { return err }
