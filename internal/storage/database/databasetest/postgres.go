package databasetest

import (
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/postingsvc/posting/internal/storage/database"
)

// DefaultPostgresURL is the server the tests use when
// POSTING_TEST_POSTGRES_URL is unset. Its database is only where the
// helper connects to create and drop the tests' own.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// NewPostgres creates a database with a random name on the test server,
// migrates it, and drops it when the test ends. It skips the test when no
// server is reachable, or fails it when POSTING_TEST_REQUIRE_POSTGRES=1.
func NewPostgres(t testing.TB) *database.DB {
	t.Helper()
	return openMigrated(t, PostgresURL(t, ""))
}

// PostgresURL creates a fresh empty database on the test server and returns
// its postgres:// URL, to hand to code that opens its own pools. The
// database is dropped when the test ends, with any session still on it.
// prefix, if set, starts the database name.
func PostgresURL(t testing.TB, prefix string) string {
	t.Helper()
	u := serverURL(t, "POSTING_TEST_POSTGRES_URL", DefaultPostgresURL)
	admin, err := openPostgresAdmin(u)
	if err != nil {
		unreachable(t, "PostgreSQL", "POSTING_TEST_POSTGRES_URL", "POSTING_TEST_REQUIRE_POSTGRES", u.Host, err)
	}
	name := databaseName(prefix)
	// FORCE: a pool the test leaked, or a killed child process's sessions,
	// must not keep the database.
	createDatabase(t, admin, name, `CREATE DATABASE "`+name+`" ENCODING 'UTF8'`,
		`DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
	u.Path = "/" + name
	return u.String()
}

func openPostgresAdmin(u *url.URL) (*sql.DB, error) {
	cfg, err := database.PostgresConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 2 * time.Second
	return pingAdmin(stdlib.OpenDB(*cfg))
}
