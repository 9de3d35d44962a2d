// Package databasetest gives each test an isolated, migrated database on
// MySQL (MariaDB), PostgreSQL and SQLite, so the same tests run on all three.
package databasetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
)

// DefaultMySQLURL is the server the tests use when POSTING_TEST_MYSQL_URL is unset.
const DefaultMySQLURL = "mysql://root@127.0.0.1:3306/test"

// Dialects lists the dialects Each runs a test on.
var Dialects = []database.Dialect{database.MySQL, database.PostgreSQL, database.SQLite}

// Each runs fn as a subtest per dialect, each with its own fresh database.
func Each(t *testing.T, fn func(t *testing.T, db *database.DB)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(string(d), func(t *testing.T) {
			fn(t, New(t, d))
		})
	}
}

// New returns a fresh migrated database of the dialect, removed when the test ends.
func New(t testing.TB, dialect database.Dialect) *database.DB {
	t.Helper()
	switch dialect {
	case database.SQLite:
		return NewSQLite(t)
	case database.MySQL:
		return NewMySQL(t)
	case database.PostgreSQL:
		return NewPostgres(t)
	default:
		t.Fatalf("unknown dialect %q", dialect)
		return nil
	}
}

// NewSQLite returns a migrated SQLite database in a file under t.TempDir().
func NewSQLite(t testing.TB) *database.DB {
	t.Helper()
	db, err := database.Open("sqlite://"+filepath.Join(t.TempDir(), "test.db"), "")
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	migrate(t, db)
	return db
}

// NewMySQL creates a database with a random name on the test server, migrates
// it, and drops it when the test ends. It skips the test when no server is
// reachable, or fails it when POSTING_TEST_REQUIRE_MYSQL=1.
func NewMySQL(t testing.TB) *database.DB {
	t.Helper()
	return openMigrated(t, MySQLURL(t, ""))
}

// openMigrated opens url, migrates it and closes it when the test ends.
func openMigrated(t testing.TB, url string) *database.DB {
	t.Helper()
	db := Open(t, url)
	migrate(t, db)
	return db
}

// Open opens a pool on the database of url (from URL, or any other) and
// closes it when the test ends; unlike New it does not migrate.
func Open(t testing.TB, url string) *database.DB {
	t.Helper()
	var db *database.DB
	err := whileFull(func() (err error) {
		db, err = database.Open(url, "")
		return err
	})
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if db.Dialect != database.SQLite {
		// A test's pool is small: the tests of all packages share one
		// server, whose connections two packages at once used to fill.
		if _, err := db.SetPool(database.Pool{MaxConns: TestPoolConns, MaxIdle: 2}); err != nil {
			t.Fatalf("size the test pool: %v", err)
		}
	}
	return db
}

// TestPoolConns bounds the connections of a pool Open returns on MySQL or
// PostgreSQL; a test that needs more sets its own with SetPool.
const TestPoolConns = 10

// Pools opens n pools on the database of url, as n instances of the
// service hold, migrates it, and closes them when the test ends.
func Pools(t testing.TB, url string, n int) []*database.DB {
	t.Helper()
	pools := make([]*database.DB, n)
	for i := range pools {
		pools[i] = Open(t, url)
	}
	migrate(t, pools[0])
	return pools
}

// MySQLURL creates a fresh empty database on the test server and returns its
// mysql:// URL, to hand to code that opens its own pools (several relay
// instances, the built binary). The database is dropped when the test ends.
// prefix, if set, starts the database name.
func MySQLURL(t testing.TB, prefix string) string {
	t.Helper()
	u := serverURL(t, "POSTING_TEST_MYSQL_URL", DefaultMySQLURL)
	dsn, err := database.MySQLDSN(u)
	if err != nil {
		t.Fatalf("POSTING_TEST_MYSQL_URL=%q: %v", u.Redacted(), err)
	}
	admin, err := openMySQLAdmin(dsn)
	if err != nil {
		unreachable(t, "MySQL", "POSTING_TEST_MYSQL_URL", "POSTING_TEST_REQUIRE_MYSQL", u.Host, err)
	}
	name := databaseName(prefix)
	createDatabase(t, admin, name,
		"CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
		"DROP DATABASE IF EXISTS `"+name+"`")
	u.Path = "/" + name
	return u.String()
}

func openMySQLAdmin(dsn string) (*sql.DB, error) {
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DBName = ""
	cfg.Timeout = 2 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	return pingAdmin(db)
}

// pingAdmin returns db, an administrative pool of two connections, once
// the server answers.
func pingAdmin(db *sql.DB) (*sql.DB, error) {
	db.SetMaxOpenConns(2)
	// A server that does not answer within 3s is missing; one that answers
	// it is full is waited for.
	if err := whileFull(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	}); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// Migrate applies the migrations to db, a database made by URL.
func Migrate(t testing.TB, db *database.DB) { t.Helper(); migrate(t, db) }

func migrate(t testing.TB, db *database.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+fullFor)
	defer cancel()
	if err := whileFull(func() error { _, err := migrations.Apply(ctx, db, nil); return err }); err != nil {
		t.Fatalf("migrate %s: %v", db.Dialect, err)
	}
}

// unreachable skips the test for a server that does not answer, or fails
// it when requireEnv is 1.
// serverURL reads the test server's URL from env, or def when unset; a URL
// that does not parse fails the test naming the variable.
func serverURL(t testing.TB, env, def string) *url.URL {
	t.Helper()
	base := os.Getenv(env)
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s=%q: %v", env, base, err)
	}
	return u
}

func unreachable(t testing.TB, server, urlEnv, requireEnv, host string, err error) {
	t.Helper()
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s required (%s=1) but not reachable at %s: %v", server, requireEnv, host, err)
	}
	t.Skipf("skipping %s test: no server reachable at %s (%v); set %s, or %s=1 to fail instead",
		server, host, err, urlEnv, requireEnv)
}

// databaseName is prefix (default posting_test) and a random suffix.
func databaseName(prefix string) string {
	if prefix == "" {
		prefix = "posting_test"
	}
	return strings.ToLower(prefix) + "_" + randomSuffix()
}

// createDatabase runs create through admin, and drop when the test ends;
// admin is closed then.
func createDatabase(t testing.TB, admin *sql.DB, name, create, drop string) {
	t.Helper()
	if err := whileFull(func() error { _, err := admin.Exec(create); return err }); err != nil {
		_ = admin.Close()
		t.Fatalf("create test database %s: %v", name, err)
	}
	// The admin pool keeps no connection while the test runs: dozens of
	// tests alive at once would hold as many of the server's connections
	// for nothing. The drop connects again.
	admin.SetMaxIdleConns(0)
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+fullFor)
		defer cancel()
		if err := whileFull(func() error { _, err := admin.ExecContext(ctx, drop); return err }); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
}

func randomSuffix() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// URL returns the URL of a fresh empty database of the dialect, for code
// that opens its own pools (several instances, the built binary): a new
// database on the MySQL or PostgreSQL test server (see MySQLURL,
// PostgresURL), or a SQLite file under t.TempDir(). prefix, if set, starts
// a server database's name.
func URL(t testing.TB, dialect database.Dialect, prefix string) string {
	t.Helper()
	switch dialect {
	case database.MySQL:
		return MySQLURL(t, prefix)
	case database.PostgreSQL:
		return PostgresURL(t, prefix)
	case database.SQLite:
		return "sqlite://" + filepath.Join(t.TempDir(), "test.db")
	default:
		t.Fatalf("unknown dialect %q", dialect)
		return ""
	}
}

// HoldSnapshot starts a transaction WITH CONSISTENT SNAPSHOT of db (MySQL)
// on a connection of its own and returns that connection: until the
// caller ends it with COMMIT, the snapshot reads the rows as they were,
// and InnoDB's purge cannot remove rows deleted after it, on the whole
// server. The test's end commits it and closes the connection.
func HoldSnapshot(t testing.TB, db *database.DB) *sql.Conn {
	t.Helper()
	sqlDB, err := db.DB.DB()
	if err != nil {
		t.Fatalf("hold a snapshot: %v", err)
	}
	ctx := context.Background()
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatalf("hold a snapshot: %v", err)
	}
	t.Cleanup(func() {
		_, _ = conn.ExecContext(ctx, "COMMIT")
		_ = conn.Close()
	})
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		t.Fatalf("hold a snapshot: %v", err)
	}
	return conn
}
