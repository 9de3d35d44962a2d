package database_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// The parameters the service does not set reach pgx as written, so they
// mean what they mean to pgx and libpq: %20 is a space
// (options=-c%20statement_timeout%3D5s is how a setting is passed), and a +
// is a plus, where url.Values would make a space of it. They used to go
// through url.Values.Encode, whose + for a space pgx reads as a plus.
func TestPostgresConfigKeepsSpacesAndPluses(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("postgres://app@db.example/posting?application_name=posting%20relay&options=-c%20statement_timeout%3D5s&search_path=a+b%2Bc&TimeZone=UTC")
	require.NoError(t, err)
	cfg, err := database.PostgresConfig(u)
	require.NoError(t, err)
	require.Equal(t, "posting relay", cfg.RuntimeParams["application_name"])
	require.Equal(t, "-c statement_timeout=5s", cfg.RuntimeParams["options"])
	require.Equal(t, "a+b+c", cfg.RuntimeParams["search_path"])
	require.Equal(t, "UTC", cfg.RuntimeParams["timezone"])
	require.NotContains(t, cfg.RuntimeParams, "TimeZone")
	direct, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	for _, k := range []string{"application_name", "options", "search_path"} {
		require.Equal(t, direct.RuntimeParams[k], cfg.RuntimeParams[k], k)
	}
}

// The same through a server: the session gets the setting that options
// names, where it failed to connect with `unrecognized configuration
// parameter "+statement_timeout"`.
func TestPostgresOptionsParameterReachesTheSession(t *testing.T) {
	t.Parallel()
	base := databasetest.URL(t, database.PostgreSQL, "options")
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	db := databasetest.Open(t, base+sep+"options=-c%20statement_timeout%3D4321&application_name=posting%20session")
	var timeout, name string
	require.NoError(t, db.Raw("SHOW statement_timeout").Scan(&timeout).Error)
	require.NoError(t, db.Raw("SHOW application_name").Scan(&name).Error)
	require.Equal(t, "4321ms", timeout)
	require.Equal(t, "posting session", name)
}

// A migration that adds a column (as 00003 and 00004 did, and as a rolling
// upgrade applies while the old instances still run) does not break the
// running instances' reads. pgx caches each query's prepared statement per
// connection, and a cached SELECT * whose table gained a column fails once
// per connection and statement with "cached plan must not change result
// type" (0A000): relay claims failed, and so would API reads (a 500).
// Reads of a model name its columns instead.
func TestPostgresReadsSurviveAnAddedColumn(t *testing.T) {
	t.Parallel()
	db := databasetest.NewPostgres(t)
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1) // one session: the one whose statements are cached
	ctx := context.Background()
	first := reservationtest.Append(t, db.DB, 1, time.Now())
	reservationtest.Append(t, db.DB, 2, time.Now())
	store := outbox.NewStore(db)
	now, err := store.Now(ctx)
	require.NoError(t, err)
	claimed, err := store.Claim(ctx, "before", 1, now)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	var m outbox.Message
	require.NoError(t, db.Where("id = ?", first.ID).Take(&m).Error)

	require.NoError(t, db.Exec("ALTER TABLE outbox ADD COLUMN added_by_a_later_migration INT").Error)

	require.NoError(t, db.Where("id = ?", first.ID).Take(&m).Error, "a read after the migration")
	require.Equal(t, first.EventID, m.EventID)
	now, err = store.Now(ctx)
	require.NoError(t, err)
	claimed, err = store.Claim(ctx, "after", 1, now)
	require.NoError(t, err, "a claim after the migration")
	require.Len(t, claimed, 1)
}

// The statement a missing database's error gives creates it whatever the
// server's template1 holds. Run as it was, CREATE DATABASE … ENCODING
// 'UTF8' fails on a server initialized under the C or POSIX locale, whose
// template1 is SQL_ASCII: "new encoding (UTF8) is incompatible with the
// encoding of the template database (SQL_ASCII)". Such a template stands in
// for template1 here (this server's is UTF8): the statement must not
// depend on it.
func TestPostgresMissingDatabaseHintWorksWithAnSQLASCIITemplate1(t *testing.T) {
	t.Parallel()
	base := databasetest.URL(t, database.PostgreSQL, "hint")
	admin := databasetest.Open(t, base)
	ascii := "r3_ascii_" + strings.ReplaceAll(strings.TrimPrefix(mustParse(t, base).Path, "/"), "hint_", "")
	require.NoError(t, admin.Exec(`CREATE DATABASE "`+ascii+`" TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'`).Error)
	t.Cleanup(func() { _ = admin.Exec(`DROP DATABASE IF EXISTS "` + ascii + `"`).Error })

	missing := mustParse(t, base)
	missing.Path += "_missing"
	_, err := database.Open(missing.String(), "")
	require.ErrorIs(t, err, database.ErrNoDatabase)
	_, stmt, ok := strings.Cut(err.Error(), "create it first: ")
	require.True(t, ok, err.Error())
	name := strings.TrimPrefix(missing.Path, "/")
	if !strings.Contains(stmt, "TEMPLATE") {
		// It copies template1: run it with the stand-in.
		stmt = strings.Replace(stmt, `"`+name+`"`, `"`+name+`" TEMPLATE "`+ascii+`"`, 1)
	}
	t.Cleanup(func() { _ = admin.Exec(`DROP DATABASE IF EXISTS "` + name + `"`).Error })
	require.NoError(t, admin.Exec(stmt).Error, stmt)
	db, err := database.Open(missing.String(), "")
	require.NoError(t, err, "the database the hint created")
	t.Cleanup(func() { _ = db.Close() })
	var enc string
	require.NoError(t, db.Raw("SHOW server_encoding").Scan(&enc).Error)
	require.Equal(t, "UTF8", enc)
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}

// The URL's parts land where pgx wants them, sessions run in UTC, and the
// parameters the service does not set are passed through.
func TestPostgresConfig(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"postgres", "postgresql"} {
		u, err := url.Parse(scheme + "://app:s%40cret@db.example:5433/posting?sslmode=disable&application_name=posting&statement_timeout=30000")
		require.NoError(t, err)
		cfg, err := database.PostgresConfig(u)
		require.NoError(t, err)
		require.Equal(t, "db.example", cfg.Host)
		require.EqualValues(t, 5433, cfg.Port)
		require.Equal(t, "app", cfg.User)
		require.Equal(t, "s@cret", cfg.Password)
		require.Equal(t, "posting", cfg.Database)
		require.Nil(t, cfg.TLSConfig, "sslmode=disable is honoured")
		require.Equal(t, "UTC", cfg.RuntimeParams["timezone"])
		require.Equal(t, "posting", cfg.RuntimeParams["application_name"])
		require.Equal(t, "30000", cfg.RuntimeParams["statement_timeout"])
		require.Equal(t, 5*time.Second, cfg.ConnectTimeout)
	}

	u, _ := url.Parse("postgres://root@localhost/posting?connect_timeout=2&timezone=UTC")
	cfg, err := database.PostgresConfig(u)
	require.NoError(t, err)
	require.EqualValues(t, 5432, cfg.Port, "the default port")
	require.Equal(t, 2*time.Second, cfg.ConnectTimeout)
	require.Equal(t, "UTC", cfg.RuntimeParams["timezone"])
}

func TestPostgresConfigRefuses(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres:///posting":                            "without host",
		"postgres://h:5432":                              "database name",
		"postgres://h:5432/a/b":                          "database name",
		"postgres://h/posting?timezone=Europe/Paris":     "timezone=Europe/Paris",
		"postgres://h/posting?TimeZone=America/New_York": "TimeZone=America/New_York",
		"postgres://h/posting?sslmode=sometimes":         "sslmode",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		_, err = database.PostgresConfig(u)
		require.ErrorIs(t, err, database.ErrInvalidURL, raw)
		require.ErrorContains(t, err, want, raw)
	}
}

// A URL without a port names the database with the default one, so the
// same database always has the same name (logs, the embedded broker's
// record of its database); credentials are left out.
func TestOpenPostgresLocation(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(databasetest.PostgresURL(t, "where")) // skips without a server
	require.NoError(t, err)
	if u.Port() != "5432" {
		t.Skipf("the test server is not on the default port: %s", u.Host)
	}
	u.Host = u.Hostname()
	u.User = url.UserPassword(u.User.Username(), "secret")
	db := databasetest.Open(t, u.String())
	require.Equal(t, database.PostgreSQL, db.Dialect)
	require.Equal(t, "postgres://"+u.Hostname()+":5432"+u.Path, db.Location)
}

// openPostgres opens rawURL and closes it when the test ends.
func openPostgres(t *testing.T, rawURL string) *database.DB {
	t.Helper()
	db := databasetest.Open(t, rawURL)
	return db
}

// A direct URL naming another database than the one the pool reaches (a
// typo, a staging copy on the same server) is refused when it is opened for
// migrations: applied there, they would leave the service's own database
// behind its code. The error names the setting and the database it reached.
func TestOpenDirectRefusesAnotherDatabase(t *testing.T) {
	t.Parallel()
	db := openPostgres(t, databasetest.PostgresURL(t, ""))
	other := databasetest.PostgresURL(t, "")
	require.NoError(t, db.SetDirectURL(other))

	direct, err := db.OpenDirect()
	if err == nil {
		_ = direct.Close()
	}
	require.ErrorIs(t, err, database.ErrInvalidURL)
	require.ErrorContains(t, err, "POSTING_DATABASE_DIRECT_URL")
	u, err2 := url.Parse(other)
	require.NoError(t, err2)
	require.ErrorContains(t, err, strings.TrimPrefix(u.Path, "/"))
}

// The direct URL of the pool's own database opens.
func TestOpenDirectOpensTheSameDatabase(t *testing.T) {
	t.Parallel()
	same := databasetest.PostgresURL(t, "")
	db := openPostgres(t, same)
	require.NoError(t, db.SetDirectURL(same))
	direct, err := db.OpenDirect()
	require.NoError(t, err)
	require.NotSame(t, db, direct)
	require.NoError(t, direct.Close())
}

// Through PgBouncer in transaction pooling, where consecutive statements of
// one client run on different server connections, the pool migrates
// (taking and releasing the migration lock) and runs concurrent statements
// with arguments without a prepared-statement error, and leaves no advisory
// lock behind on any server connection.
//
// Session pooling, which hands a client one server connection for its
// whole session, works the same.
func TestPostgresPoolThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgbouncertest.Mode{pgbouncertest.Transaction, pgbouncertest.Session} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			poolThroughPgBouncer(t, mode)
		})
	}
}

func poolThroughPgBouncer(t *testing.T, mode pgbouncertest.Mode) {
	direct := databasetest.PostgresURL(t, "")
	pooled := pgbouncertest.Start(t, direct, mode)
	db := databasetest.Open(t, pooled)
	ctx := context.Background()
	_, err := migrations.Apply(ctx, db, nil)
	require.NoError(t, err)

	const workers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				key := fmt.Sprintf("k-%d-%d", w, r)
				if err := db.Exec("INSERT INTO inbox (event_id, consumer, event_type, processed_at) VALUES (?, ?, ?, clock_timestamp())", key, "pgbouncer", "post.created").Error; err != nil {
					errs <- err
					continue
				}
				var n int64
				if err := db.Raw("SELECT count(*) FROM inbox WHERE event_id = ? AND consumer = ?", key, "pgbouncer").Scan(&n).Error; err != nil {
					errs <- err
				} else if n != 1 {
					errs <- fmt.Errorf("%s: %d rows", key, n)
				}
				// InsertMany's two round trips (describe, then execute)
				// within a transaction.
				now := database.Normalize(time.Now())
				if err := database.Transaction(ctx, db.DB, func(tx *gorm.DB) error {
					return database.InsertMany(tx, []manyEvent{
						{EventID: key + "-a", EventType: "POSTING_EVENT", AggregateID: 1, Payload: `{}`, Created: now, NextAttemptAt: now},
						{EventID: key + "-b", EventType: "POSTING_EVENT", AggregateID: 1, Payload: `{}`, Created: now, NextAttemptAt: now},
					})
				}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var rows int64
	require.NoError(t, db.Raw("SELECT count(*) FROM inbox").Scan(&rows).Error)
	require.EqualValues(t, workers*rounds, rows)
	require.NoError(t, db.Raw("SELECT count(*) FROM outbox").Scan(&rows).Error)
	require.EqualValues(t, 2*workers*rounds, rows)

	check := databasetest.Open(t, direct)
	var locks int64
	require.NoError(t, check.Raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&locks).Error)
	require.Zero(t, locks, "an advisory lock left on a server connection")
}

// A statement cut off by its context while PgBouncer (transaction pooling,
// one server session) runs it, or as it ends, leaves the next statements on
// the pool their own results: pgx closes the connection and sends a cancel
// request through the pooler, whose answer must not reach them.
func TestPostgresStatementCancelledThroughPgBouncerLeavesTheNextTheirResults(t *testing.T) {
	t.Parallel()
	direct := databasetest.PostgresURL(t, "")
	db := databasetest.Open(t, pgbouncertest.StartWithPoolSize(t, direct, pgbouncertest.Transaction, 1))
	cut := 0
	for i := range 40 {
		// Sleeps from 0 to 39 ms against a 20 ms deadline: cancels while the
		// statement runs, as it ends, and after.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := db.WithContext(ctx).Exec("SELECT pg_sleep(?::float8 / 1000)", i).Error
		cancel()
		if err != nil {
			cut++
		}
		for j := range 3 {
			want := int64(i*10 + j)
			var got int64
			require.NoError(t, db.Raw("SELECT ?::bigint", want).Scan(&got).Error, "statement %d after sleep %d ms", j, i)
			require.Equal(t, want, got, "statement %d after a sleep of %d ms read another statement's result", j, i)
		}
	}
	require.Positive(t, cut, "no statement was cut off by its context")
}
