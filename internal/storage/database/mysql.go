package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/internal/platform/backoff"
)

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
		cfg.Addr = u.Host + ":" + mysqlDriver{}.DefaultPort()
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

func openMySQL(dsn, location, name string) (*DB, error) {
	return openMySQLConfig(mysql.Config{DSN: dsn}, location, name)
}

// openMySQLConfig is openMySQL with GORM's dialector configured as cfg.
func openMySQLConfig(cfg mysql.Config, location, name string) (*DB, error) {
	g, err := gorm.Open(mysql.New(cfg), gormConfig())
	if err != nil {
		return nil, fmt.Errorf("open mysql %s: %w", location, explainMySQL(err, name))
	}
	sqlDB, err := g.DB()
	if err != nil {
		return nil, err
	}
	if err := checkAutoIncrementStep(g, location); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	sqlDB.SetMaxOpenConns(20)
	sqlDB.SetMaxIdleConns(10)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	return &DB{DB: g, Dialect: MySQL, Location: "mysql://" + location, name: name}, nil
}

// checkAutoIncrementStep refuses a server whose sessions step AUTO_INCREMENT
// by more than 1 (auto_increment_increment: multi-primary group replication
// sets it, a Galera cluster to its size) where GORM reads ids without
// RETURNING (MySQL). A multi-row INSERT (InsertMany, GORM's Create of a slice)
// learns only its first row's id and gives the others the ids that follow
// it one by one: with a step of 2 a batch's posts would be answered, and
// their events written, with ids of other posts or of none.
//
// On MariaDB 10.5 and later GORM reads the ids through RETURNING, one a row,
// and any step is taken.
func checkAutoIncrementStep(g *gorm.DB, location string) error {
	if d, ok := g.Dialector.(*mysql.Dialector); ok && idsByReturning(d.Config) {
		return nil
	}
	var step int64
	if err := g.Raw("SELECT @@SESSION.auto_increment_increment").Scan(&step).Error; err != nil {
		return fmt.Errorf("open mysql %s: read auto_increment_increment: %w", location, err)
	}
	if step != 1 {
		return fmt.Errorf("open mysql %s: the server's auto_increment_increment is %d; the service reads back "+
			"the ids of a multi-row INSERT as consecutive, so it needs 1: add ?auto_increment_increment=1 to the URL "+
			"(with one writing node), or set it on the server", location, step)
	}
	return nil
}

// idsByReturning reports whether GORM's dialector, as cfg configures it
// once it has read the server's version, reads an INSERT's ids through
// RETURNING: on MariaDB 10.5 and later, unless disabled.
func idsByReturning(cfg *mysql.Config) bool {
	if cfg.DisableWithReturning || !strings.Contains(cfg.ServerVersion, "MariaDB") {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(cfg.ServerVersion, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 10 || major == 10 && minor >= 5
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

// mysqlDriver is the Driver of MySQL and MariaDB.
type mysqlDriver struct{}

func (mysqlDriver) Dialect() Dialect { return MySQL }

func (mysqlDriver) DefaultPort() string { return "3306" }

func (mysqlDriver) DefaultMaxConns() int { return DefaultMaxConns }

// Now reads CURRENT_TIMESTAMP(6) of the server: the statement's time.
func (mysqlDriver) Now(ctx context.Context, db *gorm.DB) (time.Time, error) {
	return scanTime(ctx, db, "SELECT CURRENT_TIMESTAMP(6)")
}

func (mysqlDriver) NowExpr() clause.Expr { return clause.Expr{SQL: "CURRENT_TIMESTAMP(6)"} }

// SingleWriter is false: InnoDB locks rows.
func (mysqlDriver) SingleWriter() bool { return false }

// ReadCommitted: InnoDB's default is REPEATABLE READ, whose locking reads
// of absent rows take gap locks.
func (mysqlDriver) ReadCommitted() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

// ForUpdate is FOR UPDATE. Under REPEATABLE READ a locking read sees the
// latest committed rows, not the transaction's snapshot.
func (mysqlDriver) ForUpdate(q *gorm.DB) *gorm.DB { return forUpdate(q) }

// ForUpdateSkipLocked is FOR UPDATE SKIP LOCKED (MySQL 8.0.1+, MariaDB
// 10.6+).
func (mysqlDriver) ForUpdateSkipLocked(q *gorm.DB) *gorm.DB { return forUpdateSkipLocked(q) }

// ThroughIndex is "table FORCE INDEX (index)".
func (mysqlDriver) ThroughIndex(table, index string) string {
	return table + " FORCE INDEX (" + index + ")"
}

// InsertIgnore is INSERT ... ON DUPLICATE KEY UPDATE of the key to itself,
// as GORM writes OnConflict DoNothing: unlike INSERT IGNORE it turns no
// other error into a warning.
func (mysqlDriver) InsertIgnore(q *gorm.DB) *gorm.DB { return insertIgnore(q) }

// InsertIgnoreLocks is true: ON DUPLICATE KEY UPDATE locks the row it
// found, and takes no gap lock.
func (mysqlDriver) InsertIgnoreLocks() bool { return true }

// KeyInsert takes the key from LastInsertId: ? placeholders.
func (mysqlDriver) KeyInsert(table, key string, columns []string) KeyInsert {
	return keyInsert(table, key, columns, questionMark, false)
}

// UpdateReturning is false: MariaDB has INSERT and DELETE ... RETURNING,
// not UPDATE's, and MySQL none.
func (mysqlDriver) UpdateReturning() bool { return false }

func (mysqlDriver) BigIntType() string { return "SIGNED" }

func (mysqlDriver) KeysIn(column string, keys []int64) clause.Expr { return keysInList(column, keys) }

// PairsIn is a row-value IN over a list of row constructors, which MySQL
// resolves by primary key.
func (mysqlDriver) PairsIn(first, second string, pairs []Pair) clause.Expr {
	var b strings.Builder
	b.WriteString("(" + first + ", " + second + ") IN (")
	args := writePairs(&b, pairs, make([]any, 0, 2*len(pairs)))
	b.WriteString(")")
	return clause.Expr{SQL: b.String(), Vars: args}
}

func (mysqlDriver) After(first, second string, a, b any) clause.Expr {
	return spelledAfter(first, second, a, b)
}

// spelledAfter is "(first, second) > (a, b)" without a row value.
func spelledAfter(first, second string, a, b any) clause.Expr {
	return clause.Expr{SQL: "(" + first + " > ? OR (" + first + " = ? AND " + second + " > ?))", Vars: []any{a, a, b}}
}

// Notifies is false: MySQL has no notifications.
func (mysqlDriver) Notifies() bool { return false }

func (mysqlDriver) Notify(*gorm.DB, string, string) error { return nil }

func (mysqlDriver) Settle(*gorm.DB, ...string) error { return nil }

// AwaitPurge waits up to purgeWait for InnoDB's purge to
// remove the rows deleted before the call. Purge runs in the server's
// background, and 100,000 deleted posts and events take it seconds of a
// core, which the next writer would otherwise share: posting bench calls it
// after deleting what a measurement wrote. Purge is one for the whole
// server, so no table is named. It is done once the history list is empty
// or purge has passed every transaction numbered before the call. A
// transaction open elsewhere with a read view holds purge back for as long
// as it stays open: while one is open and purge has not moved for
// purgeStall, AwaitPurge stops waiting. A server that does not say (no
// PROCESS privilege, no such lines in its status) is not waited for.
func (mysqlDriver) AwaitPurge(db *gorm.DB) error {
	ctx := db.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	first, ok, err := innodbPurge(db)
	if err != nil || !ok {
		return err
	}
	deadline := time.Now().Add(purgeWait)
	last, moved := first, time.Now()
	for p := first; p.history > 0 && p.purgedBelow < first.nextTrx; {
		if now := time.Now(); now.After(deadline) || p.readViews && now.Sub(moved) >= purgeStall {
			return nil
		}
		if !backoff.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
		if p, ok, err = innodbPurge(db); err != nil || !ok {
			return err
		}
		// Others' commits lengthen the history while purge is held
		// back; only purge's own work counts as moving.
		if p.purgedBelow != last.purgedBelow || p.undoBelow != last.undoBelow || p.history < last.history {
			moved = time.Now()
		}
		last = p
	}
	return nil
}

// purgeWait bounds AwaitPurge's wait for InnoDB's purge.
const purgeWait = 30 * time.Second

// purgeStall is how long AwaitPurge waits for a purge that does not
// move while a read view is open elsewhere. Without a read view open, purge
// that does not move is busy with one batch (its place moves between
// batches), and AwaitPurge waits on.
const purgeStall = 5 * time.Second

// purgeState is what SHOW ENGINE INNODB STATUS says of purge: the next
// transaction number; where purge is, every transaction numbered below
// purgedBelow purged and, of the one numbered purgedBelow, its undo
// records below undoBelow; the transactions whose undo logs still wait for
// purge; and whether a transaction holds a read view, which purge cannot
// pass.
type purgeState struct {
	nextTrx, purgedBelow, undoBelow, history int64
	readViews                                bool
}

var (
	trxCounterLine = regexp.MustCompile(`Trx id counter (\d+)`)
	purgeDoneLine  = regexp.MustCompile(`Purge done for trx's n:o < (\d+) undo n:o < (\d+)`)
	historyLine    = regexp.MustCompile(`History list length (\d+)`)
)

// innodbPurge reads purgeState through db; ok is false where the server
// does not tell it: without the PROCESS privilege (ER_SPECIFIC_ACCESS_DENIED_ERROR,
// 1227) or without the lines it is read from.
func innodbPurge(db *gorm.DB) (p purgeState, ok bool, err error) {
	var typ, name, status string
	err = db.Raw("SHOW ENGINE INNODB STATUS").Row().Scan(&typ, &name, &status)
	var me *mysqldriver.MySQLError
	if errors.As(err, &me) && me.Number == 1227 {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("read InnoDB's purge state: %w", err)
	}
	return parsePurgeState(status)
}

// parsePurgeState reads purgeState from the text of SHOW ENGINE INNODB
// STATUS, as MySQL 5.6 and later and MariaDB write it; ok is false without
// the lines it is read from.
func parsePurgeState(status string) (p purgeState, ok bool, err error) {
	counter, done, history := trxCounterLine.FindStringSubmatch(status), purgeDoneLine.FindStringSubmatch(status), historyLine.FindStringSubmatch(status)
	if counter == nil || done == nil || history == nil {
		return p, false, nil
	}
	for field, digits := range map[*int64]string{&p.nextTrx: counter[1], &p.purgedBelow: done[1], &p.undoBelow: done[2], &p.history: history[1]} {
		if *field, err = strconv.ParseInt(digits, 10, 64); err != nil {
			return p, false, fmt.Errorf("read InnoDB's purge state: %w", err)
		}
	}
	p.readViews = strings.Contains(status, "Trx read view will not see")
	return p, true, nil
}

func (mysqlDriver) RefreshStatistics(*gorm.DB, ...string) ([]string, error) { return nil, nil }

// IsRetryable: the transaction was chosen as a deadlock victim (1213) or a
// lock wait timed out (1205).
func (mysqlDriver) IsRetryable(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// IsDuplicateKey: ER_DUP_ENTRY (1062), which GORM turns into
// gorm.ErrDuplicatedKey without the MySQL error.
func (mysqlDriver) IsDuplicateKey(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.Is(err, gorm.ErrDuplicatedKey) || errors.As(err, &me) && me.Number == 1062
}

// Explain is explainMySQL.
func (mysqlDriver) Explain(err error, name string) error { return explainMySQL(err, name) }
