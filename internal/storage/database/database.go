// Package database opens the service's database from its URL:
// MySQL/MariaDB or PostgreSQL in production, an embedded SQLite file otherwise.
package database

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/postingsvc/posting/internal/platform/config"
)

// ErrInvalidURL is returned for a database URL that cannot be used.
var ErrInvalidURL = errors.New("invalid database URL")

// ErrNoDatabase is returned when the database to open does not exist: a
// MySQL database not created yet, or, for OpenExisting, a missing SQLite
// file. Its message says what to do.
var ErrNoDatabase = errors.New("no database")

// EmbeddedFileName is the SQLite file used under the data dir when no URL is set.
const EmbeddedFileName = "posting.db"

// DB is an open database with the dialect it speaks.
type DB struct {
	*gorm.DB
	Dialect Dialect
	// Location says where the data lives, without credentials, for logs.
	Location string
	name     string          // the MySQL or PostgreSQL database, for messages
	pgConfig *pgx.ConnConfig // how the pool connects, on PostgreSQL
	// direct is how sessions that must last connect when the pool goes
	// through a pooler (SetDirectURL); nil: as the pool does.
	direct    *pgx.ConnConfig
	directURL string
}

// Open opens rawURL: "mysql://user:pass@host:port/db?params",
// "postgres://user:pass@host:port/db?params" (or postgresql://), "sqlite://path",
// or, when rawURL is empty, the embedded SQLite file in dataDir. A missing
// SQLite file (and its folder) is created; a missing MySQL or PostgreSQL database is
// ErrNoDatabase, with the statement that creates it.
func Open(rawURL, dataDir string) (*DB, error) { return open(rawURL, dataDir, true) }

// OpenExisting opens rawURL like Open but never creates a database: a
// missing SQLite file is ErrNoDatabase, and neither the file nor its folder
// is created. Tools that only read or change existing data use it, so that
// run from the wrong folder they say so instead of finding an empty
// database without tables.
func OpenExisting(rawURL, dataDir string) (*DB, error) { return open(rawURL, dataDir, false) }

// looksLikeMySQLDSN reports whether s is in the go-sql-driver form,
// user:password@tcp(host:port)/db, rather than a URL.
func looksLikeMySQLDSN(s string) bool {
	return !strings.Contains(s, "://") && (strings.Contains(s, "@tcp(") || strings.HasPrefix(s, "tcp(") || strings.Contains(s, "@unix("))
}

func open(rawURL, dataDir string, create bool) (*DB, error) {
	if rawURL == "" {
		if dataDir == "" {
			return nil, fmt.Errorf("%w: empty URL and no data dir", ErrInvalidURL)
		}
		return openSQLite(filepath.Join(dataDir, EmbeddedFileName), create)
	}
	if looksLikeMySQLDSN(rawURL) {
		return nil, fmt.Errorf("%w: this is a go-sql-driver DSN (user@tcp(host:port)/db); write it as a URL: "+
			"mysql://user:password@host:3306/db", ErrInvalidURL)
	}
	u, err := config.ParseURL(rawURL) // its error quotes no password
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	switch u.Scheme {
	case "mysql":
		dsn, err := MySQLDSN(u)
		if err != nil {
			return nil, err
		}
		return openMySQL(dsn, u.Host+u.Path, strings.TrimPrefix(u.Path, "/"))
	case "postgres", "postgresql":
		cfg, err := PostgresConfig(u)
		if err != nil {
			return nil, err
		}
		host := u.Host
		if u.Port() == "" {
			host += ":" + postgresDriver{}.DefaultPort() // named in full: one database, one name (logs, the embedded broker's record)
		}
		return openPostgres(cfg, host+u.Path, strings.TrimPrefix(u.Path, "/"))
	case "sqlite":
		path, err := SQLitePath(u)
		if err != nil {
			return nil, err
		}
		return openSQLite(path, create)
	default:
		return nil, fmt.Errorf("%w: scheme %q (want mysql://, postgres:// or sqlite://)", ErrInvalidURL, u.Scheme)
	}
}

// FileOf returns the file a database URL names for a database kept in a
// file (sqlite://path), and "" for a database on a server, an empty URL or
// one that does not parse.
func FileOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "sqlite" {
		return ""
	}
	path, err := SQLitePath(u)
	if err != nil {
		return ""
	}
	return path
}

// File returns the file db lives in, as its URL (or the data dir) named
// it, and "" for a database on a server (its Driver has a DefaultPort).
func (db *DB) File() string {
	if d := driverFor(db.Dialect); d == nil || d.DefaultPort() != "" {
		return ""
	}
	_, path, _ := strings.Cut(db.Location, "://")
	return path
}

func gormConfig() *gorm.Config {
	return &gorm.Config{
		Logger: logger.Discard,
		// Timestamps come from the services' injected clocks, never from GORM.
		NowFunc:                func() time.Time { return Normalize(time.Now()) },
		SkipDefaultTransaction: true,
		TranslateError:         true,
	}
}

// Explain returns err with what to do about it when the operator can fix
// its cause (a MySQL database that does not exist is ErrNoDatabase with the
// statement that creates it), and err unchanged otherwise, nil for nil.
func (db *DB) Explain(err error) error {
	if d := driverFor(db.Dialect); err != nil && d != nil {
		return d.Explain(err, db.name)
	}
	return err
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
