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

	"github.com/postingsvc/posting/internal/storage/database"
)

//go:embed mysql/*.sql postgres/*.sql sqlite/*.sql
var files embed.FS

// Up applies every migration not yet applied and returns how many it applied.
// Running it on an up-to-date database is a no-op.
//
// It holds the migration lock of the database throughout (MySQL GET_LOCK,
// PostgreSQL pg_advisory_xact_lock, a file lock beside a SQLite file), so processes started together on a
// fresh database apply each migration once: the first applies them, the
// others wait, then find nothing to do. Waiting longer than DefaultLockWait
// is ErrLockTimeout.
func Up(ctx context.Context, db *sql.DB, dialect database.Dialect, logger *slog.Logger) (int, error) {
	return up(ctx, db, dialect, logger, DefaultLockWait)
}

// Apply applies the migrations of db's dialect with Up, and explains an
// error the operator can fix (a MySQL or PostgreSQL database that is gone) as db does
// when it opens.
func Apply(ctx context.Context, db *database.DB, logger *slog.Logger) (int, error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return 0, err
	}
	n, err := Up(ctx, sqlDB, db.Dialect, logger)
	return n, db.Explain(err)
}

// dialectMigrations is what applying migrations does differently per
// dialect: goose's name for the dialect, and how the migration lock is taken.
// A dialect's SQL files are in the folder named after it.
type dialectMigrations struct {
	goose goose.Dialect
	// lock takes the migration lock, waiting at most wait, and returns the
	// function that releases it.
	lock func(ctx context.Context, db *sql.DB, wait time.Duration) (unlock func() error, err error)
}

func migrationsOf(dialect database.Dialect) (dialectMigrations, error) {
	switch dialect {
	case database.MySQL:
		return dialectMigrations{goose: goose.DialectMySQL, lock: lockMySQL}, nil
	case database.PostgreSQL:
		return dialectMigrations{goose: goose.DialectPostgres, lock: lockPostgres}, nil
	case database.SQLite:
		return dialectMigrations{goose: goose.DialectSQLite3, lock: lockSQLite}, nil
	default:
		return dialectMigrations{}, fmt.Errorf("unknown migration dialect %q", dialect)
	}
}

func up(ctx context.Context, db *sql.DB, dialect database.Dialect, logger *slog.Logger, wait time.Duration) (n int, err error) {
	dm, err := migrationsOf(dialect)
	if err != nil {
		return 0, err
	}
	p, err := provider(db, dialect, dm.goose, logger)
	if err != nil {
		return 0, err
	}
	unlock, err := dm.lock(ctx, db, wait)
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

func provider(db *sql.DB, dialect database.Dialect, gd goose.Dialect, logger *slog.Logger) (*goose.Provider, error) {
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

// Versions returns the schema version the database db is at and the newest
// one this binary holds: a command started with POSTING_MIGRATE=false on a
// database a version behind would run statements its schema lacks (a column
// of a later migration) and fail at each of them, long after its start.
func Versions(ctx context.Context, db *database.DB) (current, target int64, err error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return 0, 0, err
	}
	dm, err := migrationsOf(db.Dialect)
	if err != nil {
		return 0, 0, err
	}
	p, err := provider(sqlDB, db.Dialect, dm.goose, nil)
	if err != nil {
		return 0, 0, err
	}
	current, target, err = p.GetVersions(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read the schema version: %w", err)
	}
	return current, target, nil
}
