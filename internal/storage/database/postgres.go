package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/internal/platform/config"
)

// PostgresConfig turns a postgres:// or postgresql:// URL into the pgx
// connection config the service opens: sessions in UTC, a 5 s connect
// timeout unless connect_timeout says otherwise, and timestamptz values read
// back in UTC, so that a time read compares equal to the one written (as on
// MySQL and SQLite). Other query parameters (sslmode, sslrootcert,
// application_name, run-time settings such as statement_timeout) are passed
// to pgx.
//
// Queries run in pgx's QueryExecModeExec unless default_query_exec_mode says
// otherwise: each is parsed as the unnamed statement, bound and executed in
// one round trip, so nothing outlives it on the server. That is what makes
// the pool work through a pooler in transaction mode (PgBouncer), where
// consecutive statements of a session run on different server connections:
// the default mode's named statements ("stmtcache_...") fail there with
// 42P05 and 26000. DescribeExec needs two round trips on the same server
// connection, which such a pooler does not promise outside a transaction;
// CacheDescribe trusts a cached result description that a migration can
// change. Parameters are sent as text and typed by the server, as in a
// literal. As on MySQL the time zone is not the user's to choose: a timezone
// parameter other than UTC is ErrInvalidURL naming it.
func PostgresConfig(u *url.URL) (*pgx.ConnConfig, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: postgres URL without host (want postgres://user:pass@host:5432/db)", ErrInvalidURL)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("%w: postgres URL needs exactly one database name in its path, got %q", ErrInvalidURL, u.Path)
	}
	c := *u
	q := c.Query()
	for k, vs := range q {
		if isTimezoneParam(k) {
			for _, v := range vs {
				if !isUTCName(v) {
					return nil, fmt.Errorf("%w: postgres parameter %s=%s: the service's sessions run in UTC only (omit it, or timezone=UTC)", ErrInvalidURL, k, v)
				}
			}
		}
	}
	// The other parameters go to pgx as written: url.Values.Encode would
	// turn a space into a +, which pgx (like libpq) reads as a plus, so
	// options=-c%20statement_timeout%3D5s would fail to connect.
	var kept []string
	for _, pair := range strings.Split(c.RawQuery, "&") {
		k, _, _ := strings.Cut(pair, "=")
		if dk, err := url.QueryUnescape(k); pair == "" || err == nil && isTimezoneParam(dk) {
			continue
		}
		kept = append(kept, pair)
	}
	if q.Get("connect_timeout") == "" {
		kept = append(kept, "connect_timeout=5")
	}
	c.RawQuery = strings.Join(kept, "&")
	cfg, err := pgx.ParseConfig(c.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidURL, err)
	}
	cfg.RuntimeParams["timezone"] = "UTC"
	if q.Get("default_query_exec_mode") == "" {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return cfg, nil
}

// isTimezoneParam reports whether a URL parameter sets the session's time
// zone.
func isTimezoneParam(k string) bool { return strings.EqualFold(k, "timezone") || k == "time_zone" }

// readInUTC makes a connection return timestamptz (and timestamp) values in
// UTC rather than time.Local.
func readInUTC(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	m.RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
	m.RegisterType(&pgtype.Type{Name: "timestamp", OID: pgtype.TimestampOID,
		Codec: &pgtype.TimestampCodec{ScanLocation: time.UTC}})
	return nil
}

func openPostgres(cfg *pgx.ConnConfig, location, name string) (*DB, error) {
	sqlDB := stdlib.OpenDB(*cfg, stdlib.OptionAfterConnect(readInUTC))
	// The same pool as on MySQL: a relay, a scheduler, the API and a
	// cleaner share it; PostgreSQL's default max_connections is 100.
	sqlDB.SetMaxOpenConns(20)
	sqlDB.SetMaxIdleConns(10)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	gcfg := gormConfig()
	// pgx keeps each query's prepared statement per connection, and a
	// cached SELECT * fails once its table gains a column (0A000 "cached
	// plan must not change result type"): a migration that adds one, applied
	// while instances run, would fail their claims and reads on every
	// connection. Reading a model's columns by name keeps those statements
	// valid.
	gcfg.QueryFields = true
	g, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), gcfg)
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open postgres %s: %w", location, explainPostgres(err, name))
	}
	return &DB{DB: g, Dialect: PostgreSQL, Location: "postgres://" + location, name: name, pgConfig: cfg}, nil
}

// ErrNotPostgres is ConnectPostgres's error on another database.
var ErrNotPostgres = errors.New("not a PostgreSQL database")

// SetDirectURL gives db a direct (unpooled) URL of the same PostgreSQL
// database, for when db's own URL points at a pooler in transaction mode:
// ConnectPostgres (LISTEN) and OpenDirect (migrations and their session)
// then use it, and nothing else does. An empty rawURL removes it. A URL
// that is not PostgreSQL, or db not on PostgreSQL, is ErrInvalidURL.
func (db *DB) SetDirectURL(rawURL string) error {
	if rawURL == "" {
		db.direct, db.directURL = nil, ""
		return nil
	}
	if db.pgConfig == nil {
		return fmt.Errorf("%w: a direct URL is for a PostgreSQL database behind a pooler, and the database is %s", ErrInvalidURL, db.Location)
	}
	u, err := config.ParseURL(rawURL) // its error quotes no password
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("%w: scheme %q (want postgres:// or postgresql://, the same database without the pooler)", ErrInvalidURL, u.Scheme)
	}
	cfg, err := PostgresConfig(u)
	if err != nil {
		return err
	}
	db.direct, db.directURL = cfg, rawURL
	return nil
}

// OpenDirect opens a pool of its own on the direct URL (SetDirectURL) for
// work that needs real sessions, such as migrations and their advisory
// lock; without a direct URL it returns db itself. The caller closes what
// it got unless it is db. A direct URL that reaches another database than
// db (current_database(), which a pooler's alias does not change) is
// ErrInvalidURL naming both: migrations applied there would leave db's
// database behind.
func (db *DB) OpenDirect() (*DB, error) {
	if db.direct == nil {
		return db, nil
	}
	direct, err := Open(db.directURL, "")
	if err != nil {
		return nil, err
	}
	var pooled, reached string
	if err := db.DB.Raw("SELECT current_database()").Scan(&pooled).Error; err != nil {
		_ = direct.Close()
		return nil, err
	}
	if err := direct.DB.Raw("SELECT current_database()").Scan(&reached).Error; err != nil {
		_ = direct.Close()
		return nil, err
	}
	if pooled != reached {
		_ = direct.Close()
		return nil, fmt.Errorf("%w: POSTING_DATABASE_DIRECT_URL reaches database %q, POSTING_DATABASE_URL database %q: the direct URL must name the same database without the pooler",
			ErrInvalidURL, reached, pooled)
	}
	return direct, nil
}

// ConnectPostgres opens one connection of its own to db's PostgreSQL server,
// with the pool's settings, outside the pool: for a session that must last,
// such as a LISTEN. With a direct URL (SetDirectURL) it connects there, not
// through the pooler. The caller closes it.
func (db *DB) ConnectPostgres(ctx context.Context) (*pgx.Conn, error) {
	if db.pgConfig == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotPostgres, db.Location)
	}
	cfg := db.pgConfig
	if db.direct != nil {
		cfg = db.direct
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, err
	}
	if err := readInUTC(ctx, conn); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// explainPostgres turns invalid_catalog_name (3D000, "database does not
// exist") into ErrNoDatabase with the statement that creates it. The
// statement copies template0, since ENCODING 'UTF8' from template1 fails on
// a server initialized under the C locale, whose template1 is SQL_ASCII.
func explainPostgres(err error, name string) error {
	if pgCode(err) != "3D000" {
		return err
	}
	return fmt.Errorf("%w %q on this server (%v); create it first: CREATE DATABASE \"%s\" TEMPLATE template0 ENCODING 'UTF8'",
		ErrNoDatabase, name, err, strings.ReplaceAll(name, `"`, `""`))
}

// pgCode returns the SQLSTATE of a PostgreSQL error in err's chain, "" if
// there is none.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// postgresDriver is the Driver of PostgreSQL.
type postgresDriver struct{}

func (postgresDriver) Dialect() Dialect { return PostgreSQL }

func (postgresDriver) DefaultPort() string { return "5432" }

// DefaultMaxConns is the same pool as on MySQL; PostgreSQL's default
// max_connections is 100.
func (postgresDriver) DefaultMaxConns() int { return DefaultMaxConns }

// Now reads clock_timestamp(), the time at the moment of reading, rather
// than now() (CURRENT_TIMESTAMP), which inside a transaction is the time the
// transaction started. A claim is stamped with the time read once its locks
// are held (see outbox.Store.MarkSentAndClaim); with now() a claim that
// waited for a lock would be stamped with the moment before the wait, which
// is what reading the clock inside the transaction is there to avoid. It is
// also what MySQL's CURRENT_TIMESTAMP(6) gives: the statement's time.
func (postgresDriver) Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	return scanTime(ctx, db, "SELECT clock_timestamp()")
}

func (postgresDriver) NowExpr() clause.Expr { return clause.Expr{SQL: "clock_timestamp()"} }

// SingleWriter is false: PostgreSQL locks rows.
func (postgresDriver) SingleWriter() bool { return false }

// ReadCommitted is nil: READ COMMITTED is PostgreSQL's default.
func (postgresDriver) ReadCommitted() *sql.TxOptions { return nil }

// ForUpdate is FOR UPDATE: under READ COMMITTED a read that waited for a
// lock returns the row as the other transaction committed it.
func (postgresDriver) ForUpdate(q *gorm.DB) *gorm.DB { return forUpdate(q) }

func (postgresDriver) ForUpdateSkipLocked(q *gorm.DB) *gorm.DB { return forUpdateSkipLocked(q) }

// ThroughIndex is table: PostgreSQL takes no index hints, and locks only
// the rows a statement returns or changes.
func (postgresDriver) ThroughIndex(table, _ string) string { return table }

// InsertIgnore is INSERT ... ON CONFLICT DO NOTHING.
func (postgresDriver) InsertIgnore(q *gorm.DB) *gorm.DB { return insertIgnore(q) }

// InsertIgnoreLocks is false: ON CONFLICT DO NOTHING locks no row it
// skipped.
func (postgresDriver) InsertIgnoreLocks() bool { return false }

// KeyInsert returns the key as a row (RETURNING): pgx has no
// LastInsertId. The statement runs without GORM, so its placeholders are
// PostgreSQL's own, $1, $2, ...
func (postgresDriver) KeyInsert(table, key string, columns []string) KeyInsert {
	return keyInsert(table, key, columns, func(i int) string { return "$" + strconv.Itoa(i) }, true)
}

func (postgresDriver) UpdateReturning() bool { return true }

func (postgresDriver) BigIntType() string { return "BIGINT" }

// KeysIn is "column = ANY(?::bigint[])": one array parameter instead of one
// per key.
func (postgresDriver) KeysIn(column string, keys []int64) clause.Expr {
	return clause.Expr{SQL: column + " = ANY(?::bigint[])", Vars: []any{int64Array(keys)}}
}

// PairsIn takes the pairs as two array parameters unnested into rows: two
// bind parameters instead of two per row, and a plan PostgreSQL makes in a
// tenth of the time. A row-value IN over 500 row constructors (as on MySQL)
// spent ~2 ms planning the OR of 500 terms and more binding its 1,000
// parameters: 14.5 ms per 500-row acknowledgement of the outbox against
// 9.9 ms this way (PostgreSQL 15, alternating, 8 runs each).
func (postgresDriver) PairsIn(first, second string, pairs []Pair) clause.Expr {
	firsts, seconds := make(int64Array, len(pairs)), make(int64Array, len(pairs))
	for i, p := range pairs {
		firsts[i], seconds[i] = p.First, p.Second
	}
	return clause.Expr{SQL: "(" + first + ", " + second + ") IN (SELECT * FROM unnest(?::bigint[], ?::bigint[]))",
		Vars: []any{firsts, seconds}}
}

func (postgresDriver) After(first, second string, a, b any) clause.Expr {
	return clause.Expr{SQL: "(" + first + ", " + second + ") > (?, ?)", Vars: []any{a, b}}
}

// Notifies is true: LISTEN and NOTIFY.
func (postgresDriver) Notifies() bool { return true }

// Notify runs NOTIFY, or pg_notify with a payload.
func (postgresDriver) Notify(db *gorm.DB, channel, payload string) error {
	if payload == "" {
		return db.Exec("NOTIFY " + pgx.Identifier{channel}.Sanitize()).Error
	}
	return db.Exec("SELECT pg_notify(?, ?)", channel, payload).Error
}

func (postgresDriver) Settle(db *gorm.DB, tables ...string) error {
	for _, table := range tables {
		if err := db.Exec("VACUUM (ANALYZE) " + pgx.Identifier{table}.Sanitize()).Error; err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	return nil
}

// StaleRows and StaleShare are the changes since a table's statistics were
// taken from which RefreshStatistics takes them again on PostgreSQL: at
// least StaleRows rows, and at least StaleShare of the rows it held then.
const (
	StaleRows  = 1000
	StaleShare = 0.2
)

func (postgresDriver) AwaitPurge(*gorm.DB) error { return nil }

func (postgresDriver) RefreshStatistics(db *gorm.DB, tables ...string) ([]string, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	var stale []string
	// reltuples is -1 for a table never analyzed nor vacuumed.
	err := db.Raw(`SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		WHERE s.schemaname = current_schema() AND s.relname IN ? AND pg_has_role(c.relowner, 'USAGE')
		AND s.n_mod_since_analyze >= ? AND s.n_mod_since_analyze >= ? * GREATEST(c.reltuples, 0)
		ORDER BY s.relname`, tables, StaleRows, StaleShare).Scan(&stale).Error
	if err != nil {
		return nil, fmt.Errorf("read the tables' changes since their statistics: %w", err)
	}
	var analyzed []string
	for _, table := range stale {
		name := pgx.Identifier{table}.Sanitize()
		err := db.Transaction(func(tx *gorm.DB) error {
			// ANALYZE waits for another VACUUM or ANALYZE of the table
			// (autovacuum's, which may take long on a big one): this
			// one is not needed then. Its lock is taken first, NOWAIT:
			// a waiter would, after deadlock_timeout, have PostgreSQL
			// cancel the autovacuum holding it (below lock_timeout
			// when deadlock_timeout is tuned down), and while queued
			// would hold up DDL queued behind it. lock_timeout bounds
			// ANALYZE's other locks (its indexes').
			if err := tx.Exec("SET LOCAL lock_timeout = '1s'").Error; err != nil {
				return err
			}
			if err := tx.Exec("LOCK TABLE " + name + " IN SHARE UPDATE EXCLUSIVE MODE NOWAIT").Error; err != nil {
				return err
			}
			return tx.Exec("ANALYZE " + name).Error
		})
		if pgCode(err) == "55P03" {
			continue
		}
		if err != nil {
			return analyzed, fmt.Errorf("analyze %s: %w", table, err)
		}
		analyzed = append(analyzed, table)
	}
	return analyzed, nil
}

// IsRetryable: serialization_failure (40001), deadlock_detected (40P01),
// lock_not_available (55P03, a lock_timeout or NOWAIT).
func (postgresDriver) IsRetryable(err error) bool {
	switch pgCode(err) {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}

// IsDuplicateKey: unique_violation (23505).
func (postgresDriver) IsDuplicateKey(err error) bool {
	return errors.Is(err, gorm.ErrDuplicatedKey) || pgCode(err) == "23505"
}

// Explain is explainPostgres.
func (postgresDriver) Explain(err error, name string) error { return explainPostgres(err, name) }

// int64Array is a PostgreSQL bigint[] parameter in its text form. As a
// driver.Valuer it is one parameter: GORM expands a plain slice into a
// list of them.
type int64Array []int64

// Value is the array literal, {1,2,3}.
func (a int64Array) Value() (driver.Value, error) {
	b := make([]byte, 0, 2+len(a)*8)
	b = append(b, '{')
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, '}')), nil
}
