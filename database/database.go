// Package database opens the service's database from its URL:
// MySQL/MariaDB in production, an embedded SQLite file otherwise.
package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postingsvc/posting/migrations"
)

// ErrInvalidURL is returned for a database URL that cannot be used.
var ErrInvalidURL = errors.New("invalid database URL")

// ErrNoDatabase is returned when the database to open does not exist: a
// MySQL database not created yet, or, for OpenExisting, a missing SQLite
// file. Its message says what to do.
var ErrNoDatabase = errors.New("no database")

// sqliteBusyWait bounds how long opening a SQLite file waits for another
// process that holds it (creating it, switching it to WAL, migrating).
const sqliteBusyWait = 30 * time.Second

// EmbeddedFileName is the SQLite file used under the data dir when no URL is set.
const EmbeddedFileName = "posting.db"

// DB is an open database with the dialect it speaks.
type DB struct {
	*gorm.DB
	Dialect migrations.Dialect
	// Location says where the data lives, without credentials, for logs.
	Location string
	name     string // the MySQL database, for messages
}

// Open opens rawURL: "mysql://user:pass@host:port/db?params", "sqlite://path",
// or, when rawURL is empty, the embedded SQLite file in dataDir. A missing
// SQLite file (and its folder) is created; a missing MySQL database is
// ErrNoDatabase, with the statement that creates it.
func Open(rawURL, dataDir string) (*DB, error) { return open(rawURL, dataDir, true) }

// OpenExisting opens rawURL like Open but never creates a database: a
// missing SQLite file is ErrNoDatabase, and neither the file nor its folder
// is created. Tools that only read or change existing data use it, so that
// run from the wrong folder they say so instead of finding an empty
// database without tables.
func OpenExisting(rawURL, dataDir string) (*DB, error) { return open(rawURL, dataDir, false) }

func open(rawURL, dataDir string, create bool) (*DB, error) {
	if rawURL == "" {
		if dataDir == "" {
			return nil, fmt.Errorf("%w: empty URL and no data dir", ErrInvalidURL)
		}
		return openSQLite(filepath.Join(dataDir, EmbeddedFileName), create)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	switch u.Scheme {
	case "mysql":
		dsn, err := MySQLDSN(u)
		if err != nil {
			return nil, err
		}
		return openMySQL(dsn, u.Host+u.Path, strings.TrimPrefix(u.Path, "/"))
	case "sqlite":
		path, err := SQLitePath(u)
		if err != nil {
			return nil, err
		}
		return openSQLite(path, create)
	default:
		return nil, fmt.Errorf("%w: scheme %q (want mysql:// or sqlite://)", ErrInvalidURL, u.Scheme)
	}
}

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

// MySQLDSN turns a mysql:// URL into a go-sql-driver DSN with the settings the
// service relies on: parseTime, UTC, utf8mb4, client-side placeholders.
// Other query parameters of the URL are passed to the driver (and may
// override charset and interpolateParams). The time zone is not the user's
// to choose: every instance must read and write DATETIMEs in UTC, or two
// instances in different zones misread each other's times; so a loc or
// time_zone other than UTC, or parseTime=false, is ErrInvalidURL naming the
// parameter.
func MySQLDSN(u *url.URL) (string, error) {
	if u.Host == "" {
		return "", fmt.Errorf("%w: mysql URL without host (want mysql://user:pass@host:3306/db)", ErrInvalidURL)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("%w: mysql URL needs exactly one database name in its path, got %q", ErrInvalidURL, u.Path)
	}
	cfg := mysqldriver.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if !strings.Contains(u.Host, ":") {
		cfg.Addr = u.Host + ":3306"
	}
	cfg.DBName = name
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.Timeout = 5 * time.Second
	cfg.ReadTimeout = 30 * time.Second
	cfg.WriteTimeout = 30 * time.Second
	cfg.Params = map[string]string{
		"charset": "utf8mb4",
		// Client-side placeholders: one round trip per statement instead of
		// prepare + execute + close, which matters for batch statements.
		"interpolateParams": "true",
	}
	for k, vs := range u.Query() {
		if len(vs) == 0 {
			continue
		}
		v := vs[0]
		switch k {
		case "loc":
			if !isUTCName(v) {
				return "", fmt.Errorf("%w: mysql parameter loc=%s: the service reads and writes times in UTC only (omit loc, or loc=UTC)", ErrInvalidURL, v)
			}
		case "time_zone":
			if !isUTCName(strings.Trim(v, `'"`)) {
				return "", fmt.Errorf("%w: mysql parameter time_zone=%s: the service's sessions run in UTC only (omit time_zone, or time_zone='+00:00')", ErrInvalidURL, v)
			}
		case "parseTime", "timeout", "readTimeout", "writeTimeout":
			// These are typed fields of the driver config: go through its parser.
			parsed, err := mysqldriver.ParseDSN("u@tcp(h)/d?" + k + "=" + url.QueryEscape(v))
			if err != nil {
				return "", fmt.Errorf("%w: mysql parameter %s: %v", ErrInvalidURL, k, err)
			}
			switch k {
			case "parseTime":
				if !parsed.ParseTime {
					return "", fmt.Errorf("%w: mysql parameter parseTime=%s: the service needs parseTime=true (omit it)", ErrInvalidURL, v)
				}
			case "timeout":
				cfg.Timeout = parsed.Timeout
			case "readTimeout":
				cfg.ReadTimeout = parsed.ReadTimeout
			case "writeTimeout":
				cfg.WriteTimeout = parsed.WriteTimeout
			}
		default:
			cfg.Params[k] = v
		}
	}
	// A numeric offset, not 'UTC': a server without time zone tables
	// refuses named zones.
	cfg.Params["time_zone"] = "'+00:00'"
	return cfg.FormatDSN(), nil
}

// isUTCName reports whether s names UTC as a Go location or a MySQL session
// time zone: UTC, Etc/UTC, Z, +00:00, -00:00, +0:00 (any letter case).
func isUTCName(s string) bool {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "UTC", "ETC/UTC", "Z", "+00:00", "-00:00", "+0:00",
		"00:00": // +00:00 with its '+' not escaped in the URL reads as " 00:00"
		return true
	}
	return false
}

func gormConfig() *gorm.Config {
	return &gorm.Config{
		Logger: logger.Discard,
		// Timestamps come from the services' injected clocks, never from GORM.
		NowFunc:                func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
		SkipDefaultTransaction: true,
		TranslateError:         true,
	}
}

func openMySQL(dsn, location, name string) (*DB, error) {
	g, err := gorm.Open(mysql.New(mysql.Config{DSN: dsn}), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("open mysql %s: %w", location, explainMySQL(err, name))
	}
	sqlDB, err := g.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(20)
	sqlDB.SetMaxIdleConns(10)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	return &DB{DB: g, Dialect: migrations.MySQL, Location: "mysql://" + location, name: name}, nil
}

// explainMySQL turns "Unknown database" (error 1049) into ErrNoDatabase with
// the statement that creates it: the service creates tables, not databases.
func explainMySQL(err error, name string) error {
	var me *mysqldriver.MySQLError
	if !errors.As(err, &me) || me.Number != 1049 {
		return err
	}
	return fmt.Errorf("%w %q on this server (%v); create it first: CREATE DATABASE `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
		ErrNoDatabase, name, err, name)
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
	return &DB{DB: g, Dialect: migrations.SQLite, Location: "sqlite://" + path}, nil
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

// Migrate applies the schema migrations of the database's dialect, under
// the migration lock (see migrations.Up).
func (db *DB) Migrate(ctx context.Context, logger *slog.Logger) (int, error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return 0, err
	}
	n, err := migrations.Up(ctx, sqlDB, db.Dialect, logger)
	if err != nil && db.Dialect == migrations.MySQL {
		err = explainMySQL(err, db.name)
	}
	return n, err
}

// Ping checks that the database answers within ctx.
func (db *DB) Ping(ctx context.Context) error {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Close closes the connection pool.
func (db *DB) Close() error {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
