// Package drivertest is the suite every database.Driver passes, written
// once: each method of the interface is run on a real database, and what a
// caller counts on is checked from outside (rows read and written, locks
// waited for or skipped, errors classified, clocks). A new database passes
// Run before anything else runs on it; see internal/storage/database/drivertest_test.go.
package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// row is one row of the suite's table, created by Run.
type row struct {
	ID int64      `gorm:"column:id;primaryKey;autoIncrement;index:drivertest_rows_n_id,priority:2"`
	K  string     `gorm:"column:k;size:64;not null;uniqueIndex"`
	N  int64      `gorm:"column:n;not null;index:drivertest_rows_n_id,priority:1"`
	At *time.Time `gorm:"column:at;precision:6"`
}

func (row) TableName() string { return table }

// keyed is a row of the suite's table written with every column given, its
// key k: a model with no column the database generates, such as the inbox's
// sequences, whose Create GORM does not read back (RETURNING).
type keyed struct {
	K string `gorm:"column:k;primaryKey"`
	N int64  `gorm:"column:n"`
}

func (keyed) TableName() string { return table }

const table = "drivertest_rows"

// Run runs the suite on db, a database of the test's own (such as
// databasetest.New gives): it creates its table there and drops it when the
// test ends. The cases run one after the other: several hold locks.
func Run(t *testing.T, db *database.DB) {
	t.Helper()
	require.NoError(t, db.Migrator().CreateTable(&row{}))
	t.Cleanup(func() { _ = db.Migrator().DropTable(&row{}) })
	s := &suite{db: db, drv: db.Driver()}
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Identity", s.identity},
		{"Now", s.now},
		{"NowExpr", s.nowExpr},
		{"ForUpdate", s.forUpdate},
		{"ForUpdateSkipLocked", s.forUpdateSkipLocked},
		{"ThroughIndex", s.throughIndex},
		{"ReadCommitted", s.readCommitted},
		{"InsertIgnore", s.insertIgnore},
		{"InsertIgnoreLocks", s.insertIgnoreLocks},
		{"KeyInsert", s.keyInsert},
		{"UpdateReturning", s.updateReturning},
		{"BigIntType", s.bigIntType},
		{"KeysIn", s.keysIn},
		{"PairsIn", s.pairsIn},
		{"After", s.after},
		{"Notify", s.notify},
		{"Settle", s.settle},
		{"RefreshStatistics", s.refreshStatistics},
		{"IsDuplicateKey", s.isDuplicateKey},
		{"IsRetryable", s.isRetryable},
		{"Explain", s.explain},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	db  *database.DB
	drv database.Driver
}

// waitLong bounds every wait for a lock the suite expects to be granted.
const waitLong = 30 * time.Second

// seed writes n rows with keys prefix-1..prefix-n and n 0, and returns
// them in key order.
func (s *suite) seed(t *testing.T, prefix string, n int) []row {
	t.Helper()
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{K: fmt.Sprintf("%s-%d", prefix, i+1)}
		require.NoError(t, s.db.Create(&rows[i]).Error)
	}
	return rows
}

// read returns the row of key k.
func (s *suite) read(t *testing.T, k string) row {
	t.Helper()
	var r row
	require.NoError(t, s.db.Where("k = ?", k).Take(&r).Error)
	return r
}

// hold takes the row id with ForUpdate in a transaction of its own and
// returns once the row is held; the transaction ends when release is
// closed, or at once on a SingleWriter database, where the next
// transaction waits at its BEGIN and could not ask. done receives the
// transaction's result.
func (s *suite) hold(t *testing.T, id int64, release <-chan struct{}) (done <-chan error) {
	t.Helper()
	held := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- s.db.Transaction(func(tx *gorm.DB) error {
			var r row
			err := s.drv.ForUpdate(tx.Where("id = ?", id)).Take(&r).Error
			close(held)
			if err != nil {
				return err
			}
			if s.drv.SingleWriter() {
				time.Sleep(200 * time.Millisecond) // the other transaction is at its BEGIN by then
				return nil
			}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
			return nil
		})
	}()
	select {
	case <-held:
	case <-time.After(waitLong):
		t.Fatal("the row was not locked")
	}
	return result
}

func (s *suite) identity(t *testing.T) {
	require.Equal(t, s.db.Dialect, s.drv.Dialect())
	require.Equal(t, s.drv, database.DriverOf(s.db.DB), "a pool's driver is the DB's")
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		require.Equal(t, s.drv, database.DriverOf(tx), "a transaction's driver is its pool's")
		return nil
	}))
	// A database has a server with a default port, or a file.
	if s.drv.DefaultPort() == "" {
		require.FileExists(t, s.db.File())
	} else {
		require.Empty(t, s.db.File())
		require.NotContains(t, s.db.Location, "@", "no credentials in a location")
	}

	p, err := s.db.SetPool(database.Pool{})
	require.NoError(t, err)
	require.Equal(t, database.Pool{MaxConns: s.drv.DefaultMaxConns(), MaxIdle: s.drv.DefaultMaxConns()}, p)
	st, err := s.db.PoolStats()
	require.NoError(t, err)
	require.Equal(t, s.drv.DefaultMaxConns(), st.MaxOpenConnections)
}

// Now is the database's clock, the host's here (the test server runs on
// it), in UTC at microsecond precision; inside a transaction it is the time
// of the reading, not of the transaction's start.
func (s *suite) now(t *testing.T) {
	ctx := context.Background()
	first, err := s.drv.Now(ctx, s.db.DB)
	require.NoError(t, err)
	require.Equal(t, time.UTC, first.Location())
	require.Equal(t, first, first.Truncate(time.Microsecond))
	require.WithinDuration(t, time.Now(), first, time.Minute)

	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		in, err := s.drv.Now(ctx, tx)
		require.NoError(t, err)
		require.False(t, in.Before(first))
		time.Sleep(20 * time.Millisecond)
		later, err := s.drv.Now(ctx, tx)
		require.NoError(t, err)
		require.True(t, later.After(in), "the clock moves inside a transaction: %s then %s", in, later)
		return nil
	}))
}

// NowExpr is the same clock inside a statement: a time it writes lies
// between two readings of Now, and a stored time a second behind it is
// before it, one a second ahead after it.
func (s *suite) nowExpr(t *testing.T) {
	ctx := context.Background()
	rows := s.seed(t, "clock", 3)
	before, err := s.drv.Now(ctx, s.db.DB)
	require.NoError(t, err)
	require.NoError(t, s.db.Model(&row{}).Where("id = ?", rows[0].ID).Update("at", s.drv.NowExpr()).Error)
	after, err := s.drv.Now(ctx, s.db.DB)
	require.NoError(t, err)
	at := s.read(t, rows[0].K).At
	require.NotNil(t, at)
	require.False(t, at.Before(before), "%s written before %s", at, before)
	// Now may be at millisecond precision (SQLite), NowExpr finer.
	require.False(t, at.After(after.Add(time.Millisecond)), "%s written after %s", at, after)

	require.NoError(t, s.db.Model(&row{}).Where("id = ?", rows[1].ID).Update("at", after.Add(-time.Second)).Error)
	require.NoError(t, s.db.Model(&row{}).Where("id = ?", rows[2].ID).Update("at", after.Add(time.Hour)).Error)
	var past []string
	require.NoError(t, s.db.Model(&row{}).Where("k LIKE ? AND at < ?", "clock-%", s.drv.NowExpr()).Order("k").Pluck("k", &past).Error)
	require.Equal(t, []string{rows[0].K, rows[1].K}, past)
}

// A second ForUpdate of a held row waits for its holder, and then reads
// what the holder committed.
func (s *suite) forUpdate(t *testing.T) {
	r := s.seed(t, "lock", 1)[0]
	held := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- s.db.Transaction(func(tx *gorm.DB) error {
			var mine row
			err := s.drv.ForUpdate(tx.Where("id = ?", r.ID)).Take(&mine).Error
			close(held)
			if err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			return tx.Model(&row{}).Where("id = ?", r.ID).Update("n", 1).Error
		})
	}()
	<-held
	var got row
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		return s.drv.ForUpdate(tx.Where("id = ?", r.ID)).Take(&got).Error
	}))
	require.NoError(t, <-result)
	require.Equal(t, int64(1), got.N, "the second locking read waited for the first transaction's commit")
}

// ForUpdateSkipLocked passes over a row another transaction holds and
// takes the others at once; on a SingleWriter database the second
// transaction waits at its BEGIN instead, and then takes them all.
func (s *suite) forUpdateSkipLocked(t *testing.T) {
	rows := s.seed(t, "skip", 2)
	release := make(chan struct{})
	done := s.hold(t, rows[0].ID, release)
	var got []int64
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		return s.drv.ForUpdateSkipLocked(tx.Model(&row{}).Where("id IN ?", []int64{rows[0].ID, rows[1].ID})).
			Order("id").Pluck("id", &got).Error
	}))
	close(release)
	require.NoError(t, <-done)
	if s.drv.SingleWriter() {
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, got)
	} else {
		require.Equal(t, []int64{rows[1].ID}, got, "the held row is skipped")
	}
}

// ThroughIndex names a table in a statement the database runs, and a
// locking read through the index of a range after a cursor holds only the
// rows it returns: another transaction's ForUpdateSkipLocked of the whole
// range takes every other row, those before the cursor too. (MariaDB chose
// the range here without the hint; the scheduler's read of the posts is the
// case where it did not, see reservation's
// TestSchedulerLaterBatchLocksOnlyThePostsItReads.) On a SingleWriter
// database the read returns the same rows, and no row is held.
func (s *suite) throughIndex(t *testing.T) {
	rows := s.seed(t, "through", 8)
	// An n of their own: rows of the other cases stay out of the range.
	require.NoError(t, s.db.Model(&row{}).Where("k LIKE ?", "through-%").Update("n", 100).Error)
	read := func(q *gorm.DB, limit int) []int64 {
		var got []int64
		q = q.Table(s.drv.ThroughIndex(table, "drivertest_rows_n_id")).Where("n = ?", 100)
		require.NoError(t, s.drv.ForUpdateSkipLocked(q).Order("n, id").Limit(limit).Pluck("id", &got).Error)
		return got
	}
	afterCursor := func(q *gorm.DB) []int64 { return read(q.Where(s.drv.After("n", "id", 100, rows[3].ID)), 2) }
	if s.drv.SingleWriter() {
		require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
			require.Equal(t, []int64{rows[4].ID, rows[5].ID}, afterCursor(tx))
			return nil
		}))
		return
	}
	holder := s.db.Begin()
	require.NoError(t, holder.Error)
	defer holder.Rollback()
	require.Equal(t, []int64{rows[4].ID, rows[5].ID}, afterCursor(holder))
	var rest []int64
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		rest = read(tx, len(rows))
		return nil
	}))
	require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID, rows[6].ID, rows[7].ID}, rest,
		"the rows before the holder's cursor are free, and only the two it read are held")
}

// ReadCommitted's transaction sees a row another transaction committed
// after its first read; where it returns options, a transaction begun
// without them does not (its default is stronger).
func (s *suite) readCommitted(t *testing.T) {
	ctx := context.Background()
	opts := s.drv.ReadCommitted()
	if s.drv.SingleWriter() {
		// Nobody else commits while a transaction runs: the options only
		// have to begin one.
		var begin []*sql.TxOptions
		if opts != nil {
			begin = append(begin, opts)
		}
		require.NoError(t, database.Transaction(ctx, s.db.DB, func(tx *gorm.DB) error {
			var n int64
			return tx.Model(&row{}).Count(&n).Error
		}, begin...))
		return
	}
	seen := func(k string, begin ...*sql.TxOptions) int64 {
		var n int64
		require.NoError(t, database.Transaction(ctx, s.db.DB, func(tx *gorm.DB) error {
			var first int64
			if err := tx.Model(&row{}).Where("k = ?", k).Count(&first).Error; err != nil {
				return err
			}
			require.Zero(t, first)
			if err := s.db.Create(&row{K: k}).Error; err != nil { // another connection, committed at once
				return err
			}
			return tx.Model(&row{}).Where("k = ?", k).Count(&n).Error
		}, begin...))
		return n
	}
	if opts == nil {
		require.Equal(t, int64(1), seen("rc-default"), "READ COMMITTED is the default")
		return
	}
	require.Equal(t, int64(1), seen("rc-with", opts), "READ COMMITTED sees the commit")
	require.Equal(t, int64(0), seen("rc-without"), "the default isolation is stronger than READ COMMITTED")
}

// InsertIgnore writes the rows whose key is free, skips the others
// without an error and without changing them, and counts only the rows it
// wrote (a model with no generated column, as InsertIgnore says).
func (s *suite) insertIgnore(t *testing.T) {
	require.NoError(t, s.db.Create(&row{K: "ign-a", N: 7}).Error)
	res := s.drv.InsertIgnore(s.db.DB).Create(&keyed{K: "ign-a", N: 9})
	require.NoError(t, res.Error)
	require.Zero(t, res.RowsAffected, "a skipped row is not counted")
	res = s.drv.InsertIgnore(s.db.DB).Create(&keyed{K: "ign-b", N: 9})
	require.NoError(t, res.Error)
	require.Equal(t, int64(1), res.RowsAffected)
	batch := []keyed{{K: "ign-a", N: 9}, {K: "ign-c", N: 9}, {K: "ign-b", N: 9}}
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		res := s.drv.InsertIgnore(tx).Create(&batch)
		require.Equal(t, int64(1), res.RowsAffected)
		return res.Error
	}))
	// A model with a generated key is written the same way.
	require.NoError(t, s.drv.InsertIgnore(s.db.DB).Create(&[]row{{K: "ign-a", N: 9}, {K: "ign-d", N: 9}}).Error)
	for k, n := range map[string]int64{"ign-a": 7, "ign-b": 9, "ign-c": 9, "ign-d": 9} {
		require.Equal(t, n, s.read(t, k).N, k)
	}
}

// Where InsertIgnoreLocks says so, a row InsertIgnore skipped stays locked
// until its transaction ends: another transaction's UPDATE of it waits.
// Where it does not, that UPDATE goes through at once.
func (s *suite) insertIgnoreLocks(t *testing.T) {
	require.NoError(t, s.db.Create(&row{K: "held"}).Error)
	updated := make(chan error, 1)
	finished := false
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		if err := s.drv.InsertIgnore(tx).Create(&row{K: "held", N: 5}).Error; err != nil {
			return err
		}
		go func() { updated <- s.db.Model(&row{}).Where("k = ?", "held").Update("n", gorm.Expr("n + 1")).Error }()
		wait := 10 * time.Second
		if s.drv.InsertIgnoreLocks() {
			wait = 500 * time.Millisecond
		}
		select {
		case err := <-updated:
			require.NoError(t, err)
			finished = true
		case <-time.After(wait):
		}
		return nil
	}))
	if !finished {
		select {
		case err := <-updated:
			require.NoError(t, err)
		case <-time.After(waitLong):
			t.Fatal("the UPDATE did not go through once the transaction ended")
		}
	}
	require.Equal(t, !s.drv.InsertIgnoreLocks(), finished, "the UPDATE went through while the row was skipped by an open transaction")
	require.Equal(t, int64(1), s.read(t, "held").N)
}

// keyInsertOf is the suite's KeyInsert into k and n.
func (s *suite) keyInsertOf(t *testing.T) database.KeyInsert {
	t.Helper()
	stmt := &gorm.Statement{DB: s.db.DB}
	require.NoError(t, stmt.Parse(&row{}))
	return s.drv.KeyInsert(stmt.Quote(table), stmt.Quote("id"), []string{stmt.Quote("k"), stmt.Quote("n")})
}

// KeyInsert writes a row on a transaction's connection and returns the key
// the database gave it.
func (s *suite) keyInsert(t *testing.T) {
	ctx := context.Background()
	ins := s.keyInsertOf(t)
	var ids []int64
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		for i := range 2 {
			id, err := ins.Exec(ctx, tx.Statement.ConnPool, fmt.Sprintf("key-%d", i+1), int64(i+10))
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	}))
	require.Len(t, ids, 2)
	require.Positive(t, ids[0])
	require.Greater(t, ids[1], ids[0])
	for i, id := range ids {
		var r row
		require.NoError(t, s.db.Take(&r, id).Error)
		require.Equal(t, row{ID: id, K: fmt.Sprintf("key-%d", i+1), N: int64(i + 10)}, r)
	}
	// On the pool as well.
	id, err := ins.Exec(ctx, s.db.Statement.ConnPool, "key-3", int64(12))
	require.NoError(t, err)
	require.Equal(t, "key-3", s.read(t, "key-3").K)
	require.Equal(t, id, s.read(t, "key-3").ID)
}

// Where UpdateReturning says so, an UPDATE ... RETURNING returns the rows
// as it left them, and a subquery made ForUpdateSkipLocked picks the rows
// no other transaction holds (the outbox's claim); elsewhere the statement
// fails and changes nothing.
func (s *suite) updateReturning(t *testing.T) {
	rows := s.seed(t, "ret", 2)
	keys := []string{rows[0].K, rows[1].K}
	var got []row
	err := s.db.Raw("UPDATE "+table+" SET n = n + 1 WHERE k IN ? RETURNING id, k, n", keys).Scan(&got).Error
	if !s.drv.UpdateReturning() {
		require.Error(t, err, "the database runs UPDATE ... RETURNING, and UpdateReturning says it does not")
		require.Zero(t, s.read(t, rows[0].K).N)
		return
	}
	require.NoError(t, err)
	require.ElementsMatch(t, []row{{ID: rows[0].ID, K: rows[0].K, N: 1}, {ID: rows[1].ID, K: rows[1].K, N: 1}}, got)

	release := make(chan struct{})
	done := s.hold(t, rows[0].ID, release)
	got = nil
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		free := s.drv.ForUpdateSkipLocked(tx.Model(&row{}).Select("id").
			Where(s.drv.KeysIn("id", []int64{rows[0].ID, rows[1].ID})).Where("n = ?", 1))
		return tx.Raw("UPDATE "+table+" SET n = n + 1 WHERE id IN (?) RETURNING id, k, n", free).Scan(&got).Error
	}))
	close(release)
	require.NoError(t, <-done)
	if s.drv.SingleWriter() {
		require.ElementsMatch(t, []row{{ID: rows[0].ID, K: rows[0].K, N: 2}, {ID: rows[1].ID, K: rows[1].K, N: 2}}, got)
	} else {
		require.Equal(t, []row{{ID: rows[1].ID, K: rows[1].K, N: 2}}, got, "the held row is skipped")
	}
}

// BigIntType types a parameter as a 64-bit integer where the database
// would guess, as in a CASE of parameters written to an integer column.
func (s *suite) bigIntType(t *testing.T) {
	big := int64(1)<<40 + 3
	var v int64
	require.NoError(t, s.db.Raw("SELECT CASE WHEN 1 = 1 THEN CAST(? AS "+s.drv.BigIntType()+") END", big).Scan(&v).Error)
	require.Equal(t, big, v)

	rows := s.seed(t, "cast", 2)
	cast := "CAST(? AS " + s.drv.BigIntType() + ")"
	require.NoError(t, s.db.Exec("UPDATE "+table+" SET n = CASE k WHEN ? THEN "+cast+" WHEN ? THEN "+cast+" END WHERE k IN ?",
		rows[0].K, big, rows[1].K, -big, []string{rows[0].K, rows[1].K}).Error)
	require.Equal(t, big, s.read(t, rows[0].K).N)
	require.Equal(t, -big, s.read(t, rows[1].K).N)
}

// KeysIn picks the rows of the keys it lists, in a read and in a write.
func (s *suite) keysIn(t *testing.T) {
	rows := s.seed(t, "keys", 3)
	ids := []int64{rows[0].ID, rows[2].ID, rows[2].ID + 1_000_000}
	var got []string
	require.NoError(t, s.db.Model(&row{}).Where(s.drv.KeysIn("id", ids)).Order("id").Pluck("k", &got).Error)
	require.Equal(t, []string{rows[0].K, rows[2].K}, got)
	res := s.db.Model(&row{}).Where(s.drv.KeysIn("id", ids)).Update("n", gorm.Expr("n + 1"))
	require.NoError(t, res.Error)
	require.Equal(t, int64(2), res.RowsAffected)
	long := make([]int64, 1000)
	for i := range long {
		long[i] = rows[1].ID + int64(i)*1_000_000 // only the first is a row
	}
	got = nil
	require.NoError(t, s.db.Model(&row{}).Where(s.drv.KeysIn("id", long)).Pluck("k", &got).Error)
	require.Equal(t, []string{rows[1].K}, got)
}

// PairsIn matches the rows whose (first, second) is one of the pairs: the
// outbox's version check, over a short list and a long one.
func (s *suite) pairsIn(t *testing.T) {
	rows := s.seed(t, "pairs", 3)
	require.NoError(t, s.db.Model(&row{}).Where("id = ?", rows[1].ID).Update("n", 5).Error)
	pairs := []database.Pair{{First: rows[0].ID, Second: 0}, {First: rows[1].ID, Second: 0}, {First: rows[2].ID, Second: 0}}
	res := s.db.Model(&row{}).Where(s.drv.PairsIn("id", "n", pairs)).Update("n", gorm.Expr("n + 1"))
	require.NoError(t, res.Error)
	require.Equal(t, int64(2), res.RowsAffected, "the row whose n moved on is left alone")
	for k, n := range map[string]int64{rows[0].K: 1, rows[1].K: 5, rows[2].K: 1} {
		require.Equal(t, n, s.read(t, k).N, k)
	}

	long := make([]database.Pair, 1000)
	for i := range long {
		long[i] = database.Pair{First: rows[2].ID + int64(i)*1_000_000, Second: 1} // only the first is a row
	}
	var got []string
	require.NoError(t, s.db.Model(&row{}).Where(s.drv.PairsIn("id", "n", long)).Pluck("k", &got).Error)
	require.Equal(t, []string{rows[2].K}, got)
}

// After takes the rows after a cursor in (n, id) order: those with a
// greater n, and those with the cursor's n and a greater id. On PostgreSQL
// it is a condition of the index scan itself, so a page starts at its
// cursor instead of walking the entries before it.
func (s *suite) after(t *testing.T) {
	rows := s.seed(t, "after", 6)
	for i, n := range []int64{1, 2, 2, 2, 3, 3} {
		require.NoError(t, s.db.Model(&row{}).Where("id = ?", rows[i].ID).Update("n", n).Error)
	}
	page := func(n, id int64) []string {
		var got []string
		require.NoError(t, s.db.Model(&row{}).Where("k LIKE ?", "after-%").Where(s.drv.After("n", "id", n, id)).
			Order("n, id").Pluck("k", &got).Error)
		return got
	}
	require.Equal(t, []string{rows[2].K, rows[3].K, rows[4].K, rows[5].K}, page(2, rows[1].ID))
	require.Equal(t, []string{rows[4].K, rows[5].K}, page(2, rows[3].ID))
	require.Equal(t, []string{rows[1].K, rows[2].K, rows[3].K, rows[4].K, rows[5].K}, page(1, rows[0].ID))
	require.Empty(t, page(3, rows[5].ID))
	if s.db.Dialect != database.PostgreSQL {
		return
	}
	// The index on (n, id) is made with the table, while it is empty: one
	// built later over rows updated in place (HOT) is usable only by
	// transactions that began after every one older than it ended, which
	// other tests on the server keep from happening.
	var plan []string
	require.NoError(t, s.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SET LOCAL enable_seqscan = off").Error; err != nil {
			return err
		}
		stmt := tx.Session(&gorm.Session{DryRun: true}).Model(&row{}).Where(s.drv.After("n", "id", 2, rows[1].ID)).Order("n, id").Find(&[]row{}).Statement
		return tx.Raw("EXPLAIN "+stmt.SQL.String(), stmt.Vars...).Scan(&plan).Error
	}))
	require.Regexp(t, `Index Cond: \(ROW\(n, id\) > ROW\(`, strings.Join(plan, "\n"), "the cursor is not a condition of the index scan")
}

// Notify reaches a session that LISTENs on the channel, with its payload
// or none; where the database has no notifications it does nothing.
func (s *suite) notify(t *testing.T) {
	const channel = "drivertest_channel"
	if !s.drv.Notifies() {
		require.NoError(t, s.drv.Notify(s.db.DB, channel, "ignored"))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn, err := s.db.ConnectPostgres(ctx)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	for _, payload := range []string{"hello", ""} {
		require.NoError(t, s.drv.Notify(s.db.DB, channel, payload))
		n, err := conn.WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, channel, n.Channel)
		require.Equal(t, payload, n.Payload)
	}
}

// Settle leaves the rows that were not deleted as they are; on
// PostgreSQL it has vacuumed and analyzed the table once it returns.
func (s *suite) settle(t *testing.T) {
	rows := s.seed(t, "settle", 5)
	require.NoError(t, s.db.Where("k IN ?", []string{rows[0].K, rows[1].K, rows[2].K}).Delete(&row{}).Error)
	require.NoError(t, s.drv.Settle(s.db.DB, table))
	require.Equal(t, rows[3], s.read(t, rows[3].K))
	require.Equal(t, rows[4], s.read(t, rows[4].K))
	var left int64
	require.NoError(t, s.db.Model(&row{}).Where("k LIKE ?", "settle-%").Count(&left).Error)
	require.EqualValues(t, 2, left)
	if s.db.Dialect != database.PostgreSQL {
		return
	}
	var vacuumed, analyzed bool
	require.NoError(t, s.db.Raw("SELECT last_vacuum IS NOT NULL, last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = ?", table).
		Row().Scan(&vacuumed, &analyzed))
	require.True(t, vacuumed, "VACUUM has not run on %s", table)
	require.True(t, analyzed, "ANALYZE has not run on %s", table)
}

// RefreshStatistics analyzes, on PostgreSQL, a table named to it once more
// than database.StaleRows of its rows changed since its statistics were
// taken, and then not again until it changes that much once more; it passes
// over a table not named. Elsewhere it returns nothing.
func (s *suite) refreshStatistics(t *testing.T) {
	if s.db.Dialect == database.PostgreSQL {
		// Autovacuum would otherwise be free to analyze it first.
		require.NoError(t, s.db.Exec("ALTER TABLE "+table+" SET (autovacuum_enabled = false)").Error)
	}
	require.NoError(t, s.drv.Settle(s.db.DB, table))
	rows := make([]row, database.StaleRows+100)
	for i := range rows {
		rows[i] = row{K: fmt.Sprintf("stats-%d", i+1)}
	}
	require.NoError(t, s.db.CreateInBatches(&rows, 500).Error)
	if s.db.Dialect != database.PostgreSQL {
		got, err := s.drv.RefreshStatistics(s.db.DB, table)
		require.NoError(t, err)
		require.Empty(t, got)
		return
	}
	stats := func() (analyzed, changed int64) {
		require.NoError(t, s.db.Raw("SELECT analyze_count, n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = ?", table).
			Row().Scan(&analyzed, &changed))
		return analyzed, changed
	}
	// Each writer's counts reach the statistics views within about a
	// second of its commit.
	changedBy := func(n int64) {
		deadline := time.Now().Add(waitLong)
		for {
			_, changed := stats()
			if changed >= n {
				return
			}
			require.True(t, time.Now().Before(deadline), "pg_stat_user_tables counts %d changes of %s, want %d", changed, table, n)
			time.Sleep(100 * time.Millisecond)
		}
	}
	changedBy(int64(len(rows)))
	before, _ := stats()

	got, err := s.drv.RefreshStatistics(s.db.DB, "drivertest_absent", "idempotency_keys")
	require.NoError(t, err)
	require.Empty(t, got, "tables not named")
	got, err = s.drv.RefreshStatistics(s.db.DB, table)
	require.NoError(t, err)
	require.Equal(t, []string{table}, got)
	after, changed := stats()
	require.Equal(t, before+1, after, "ANALYZE runs of %s", table)
	require.Zero(t, changed)

	s.seed(t, "stats-few", 10)
	changedBy(10)
	got, err = s.drv.RefreshStatistics(s.db.DB, table)
	require.NoError(t, err)
	require.Empty(t, got, "10 rows changed of %d", len(rows))
	again, _ := stats()
	require.Equal(t, after, again)
}

// IsDuplicateKey recognizes a taken key as GORM reports it
// (gorm.ErrDuplicatedKey, which callers test) and as the database's own
// driver does (a statement run without GORM, such as KeyInsert's), and
// nothing else.
func (s *suite) isDuplicateKey(t *testing.T) {
	r := s.seed(t, "dup", 1)[0]
	err := s.db.Create(&row{K: r.K}).Error
	require.ErrorIs(t, err, gorm.ErrDuplicatedKey)
	require.True(t, s.drv.IsDuplicateKey(err), "%v", err)
	err = s.db.Create(&row{ID: r.ID, K: "dup-other"}).Error
	require.True(t, s.drv.IsDuplicateKey(err), "a taken primary key: %v", err)

	_, err = s.keyInsertOf(t).Exec(context.Background(), s.db.Statement.ConnPool, r.K, int64(0))
	require.Error(t, err)
	require.True(t, s.drv.IsDuplicateKey(err), "%v", err)

	require.False(t, s.drv.IsDuplicateKey(nil))
	require.False(t, s.drv.IsDuplicateKey(s.db.Exec("SELEC 1").Error))
	require.False(t, s.drv.IsDuplicateKey(errors.New("duplicate")))
}

// IsRetryable recognizes the conflict two transactions run into: where
// rows are locked, two that lock two rows in opposite order deadlock and
// the database fails one; where writers take turns, a transaction that read
// before another's commit cannot write after it. The database's other
// errors are not retryable.
func (s *suite) isRetryable(t *testing.T) {
	require.False(t, s.drv.IsRetryable(nil))
	require.False(t, s.drv.IsRetryable(s.db.Exec("SELEC 1").Error))
	dup := s.seed(t, "retry-dup", 1)[0]
	require.False(t, s.drv.IsRetryable(s.db.Create(&row{K: dup.K}).Error))

	var conflict error
	if s.drv.SingleWriter() {
		conflict = s.staleWrite(t)
	} else {
		conflict = s.deadlock(t)
	}
	require.Error(t, conflict)
	require.True(t, s.drv.IsRetryable(conflict), "%v", conflict)
	require.True(t, database.IsRetryable(conflict), "%v", conflict)
	require.False(t, s.drv.IsDuplicateKey(conflict))
}

// deadlock runs two transactions that each update one row, then the
// other's, and returns the error of the one the database failed.
func (s *suite) deadlock(t *testing.T) error {
	rows := s.seed(t, "deadlock", 2)
	var holding sync.WaitGroup
	holding.Add(2)
	run := func(first, second int64) error {
		return s.db.Transaction(func(tx *gorm.DB) error {
			err := tx.Model(&row{}).Where("id = ?", first).Update("n", gorm.Expr("n + 1")).Error
			holding.Done()
			if err != nil {
				return err
			}
			holding.Wait() // both hold their first row: the deadlock is certain
			return tx.Model(&row{}).Where("id = ?", second).Update("n", gorm.Expr("n + 1")).Error
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(rows[0].ID, rows[1].ID) }()
	go func() { errs <- run(rows[1].ID, rows[0].ID) }()
	var failed []error
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				failed = append(failed, err)
			}
		case <-time.After(waitLong):
			t.Fatal("the transactions did not finish")
		}
	}
	require.Len(t, failed, 1, "one transaction fails, the other commits: %v", failed)
	return failed[0]
}

// staleWrite begins a transaction on a connection of its own (deferred:
// it takes no lock before its first write), reads a row, lets another
// connection update it, and returns the error of its own update.
func (s *suite) staleWrite(t *testing.T) error {
	ctx := context.Background()
	r := s.seed(t, "stale", 1)[0]
	sqlDB, err := s.db.DB.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // ends the transaction if the update did not
	var n int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT n FROM "+table+" WHERE id = ?", r.ID).Scan(&n))
	require.NoError(t, s.db.Model(&row{}).Where("id = ?", r.ID).Update("n", gorm.Expr("n + 1")).Error)
	_, err = conn.ExecContext(ctx, "UPDATE "+table+" SET n = ? WHERE id = ?", n+1, r.ID)
	return err
}

// Explain returns an error whose cause is not the operator's to fix as it
// is. (The missing database it explains is checked where a URL names one:
// database's TestOpenMySQLUnknownDatabaseSaysCreateIt and
// TestPostgresMissingDatabaseHintWorksWithAnSQLASCIITemplate1.)
func (s *suite) explain(t *testing.T) {
	plain := errors.New("plain")
	require.Equal(t, plain, s.drv.Explain(plain, "posting"))
	stmt := s.db.Exec("SELEC 1").Error
	require.Equal(t, stmt, s.drv.Explain(stmt, "posting"))
	require.NoError(t, s.db.Explain(nil))
}
