// Package migrations holds the schema as SQL files, one folder per dialect,
// applied by goose from an embedded file system so the binary needs nothing
// on disk.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/pressly/goose/v3"
)

//go:embed mysql/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a folder of migrations: "mysql" or "sqlite".
type Dialect string

// The dialects the service runs on.
const (
	MySQL  Dialect = "mysql"
	SQLite Dialect = "sqlite"
)

// Up applies every migration not yet applied and returns how many it applied.
// Running it on an up-to-date database is a no-op.
//
// It holds the migration lock of the database throughout (MySQL GET_LOCK,
// a file lock beside a SQLite file), so processes started together on a
// fresh database apply each migration once: the first applies them, the
// others wait, then find nothing to do. Waiting longer than DefaultLockWait
// is ErrLockTimeout.
func Up(ctx context.Context, db *sql.DB, dialect Dialect, logger *slog.Logger) (int, error) {
	return up(ctx, db, dialect, logger, DefaultLockWait)
}

func up(ctx context.Context, db *sql.DB, dialect Dialect, logger *slog.Logger, wait time.Duration) (n int, err error) {
	p, err := provider(db, dialect, logger)
	if err != nil {
		return 0, err
	}
	lock := lockMySQL
	if dialect == SQLite {
		lock = lockSQLite
	}
	unlock, err := lock(ctx, db, wait)
	if err != nil {
		return 0, fmt.Errorf("apply %s migrations: %w", dialect, err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("apply %s migrations: %w", dialect, uerr))
		}
	}()
	results, err := p.Up(ctx)
	if err != nil {
		return len(results), fmt.Errorf("apply %s migrations: %w", dialect, err)
	}
	return len(results), nil
}

func provider(db *sql.DB, dialect Dialect, logger *slog.Logger) (*goose.Provider, error) {
	var gd goose.Dialect
	switch dialect {
	case MySQL:
		gd = goose.DialectMySQL
	case SQLite:
		gd = goose.DialectSQLite3
	default:
		return nil, fmt.Errorf("unknown migration dialect %q", dialect)
	}
	sub, err := fs.Sub(files, string(dialect))
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	return goose.NewProvider(gd, db, sub, opts...)
}
