package databasetest

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// counters is a table of one row the fault tests write to.
func counters(t *testing.T) *gorm.DB {
	t.Helper()
	db := NewSQLite(t).DB
	require.NoError(t, db.Exec("CREATE TABLE counters (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)").Error)
	require.NoError(t, db.Exec("INSERT INTO counters (id, n) VALUES (1, 0)").Error)
	return db
}

func count(t *testing.T, db *gorm.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Raw("SELECT n FROM counters WHERE id = 1").Scan(&n).Error)
	return n
}

// An outage fails the kinds of statement it was given, and only while it is
// on; the failed write leaves the row as it was.
func TestOutageFailsItsStatementsWhileOn(t *testing.T) {
	t.Parallel()
	db := counters(t)
	down := Outage(t, db, StmtUpdate)
	update := func(n int) error { return db.Table("counters").Where("id = 1").Update("n", n).Error }

	require.NoError(t, update(1))
	down.Store(true)
	require.ErrorIs(t, update(2), driver.ErrBadConn)
	require.Equal(t, 1, count(t, db), "reads go on during a write outage")
	var rows int64
	require.NoError(t, db.Table("counters").Count(&rows).Error)
	require.EqualValues(t, 1, rows)
	down.Store(false)
	require.NoError(t, update(3))
	require.Equal(t, 3, count(t, db))
}

// Fail with Once fails the first matching statement only; others pass.
func TestFailOnceFailsTheFirstMatchOnly(t *testing.T) {
	t.Parallel()
	db := counters(t)
	forced := errors.New("forced")
	Fail(t, db, StmtExec, forced, Once(SQLStarts("UPDATE counters")))

	require.NoError(t, db.Exec("INSERT INTO counters (id, n) VALUES (2, 0)").Error)
	require.ErrorIs(t, db.Exec("UPDATE counters SET n = n + 1").Error, forced)
	require.Equal(t, 0, count(t, db))
	require.NoError(t, db.Exec("UPDATE counters SET n = n + 1").Error)
	require.Equal(t, 1, count(t, db))
}

// Before runs ahead of the statement, After behind it with its outcome; a
// hook is only on the kinds it names, and Table picks statements by table.
func TestBeforeAndAfterSurroundTheirStatements(t *testing.T) {
	t.Parallel()
	db := counters(t)
	var seen []string
	Before(t, db, StmtQuery|StmtUpdate, func(tx *gorm.DB) {
		if Table("counters")(tx) {
			seen = append(seen, "before")
		}
	})
	After(t, db, StmtQuery, func(tx *gorm.DB) {
		seen = append(seen, "after rows="+map[bool]string{true: "1", false: "?"}[tx.RowsAffected == 1])
	})
	var n int64
	require.NoError(t, db.Table("counters").Count(&n).Error)
	require.Equal(t, []string{"before", "after rows=1"}, seen)
	require.NoError(t, db.Table("counters").Where("id = 1").Update("n", 5).Error)
	require.Equal(t, []string{"before", "after rows=1", "before"}, seen)
	require.NoError(t, db.Exec("UPDATE counters SET n = 6").Error)
	require.Len(t, seen, 3, "no hook on Exec")
}

// eachProxied runs fn on MySQL and PostgreSQL, each a fresh database
// reached through a proxy, and answering.
func eachProxied(t *testing.T, fn func(t *testing.T, db *database.DB, p *Proxy)) {
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			u, p := Proxied(t, URL(t, d, "proxy"))
			db := Open(t, u)
			require.NoError(t, selectOne(context.Background(), db))
			fn(t, db, p)
		})
	}
}

func selectOne(ctx context.Context, db *database.DB) error {
	var one int
	return db.WithContext(ctx).Raw("SELECT 1").Scan(&one).Error
}

// A cut proxy resets the pool's connections and refuses new ones until
// Resume; then the pool reaches the server again.
func TestProxyCutRefusesConnectionsUntilResume(t *testing.T) {
	t.Parallel()
	eachProxied(t, func(t *testing.T, db *database.DB, p *Proxy) {
		p.Cut()
		for range 3 { // each connection the pool may still hold, then a new one
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := selectOne(ctx, db)
			cancel()
			require.Error(t, err)
		}
		p.Resume()
		require.Eventually(t, func() bool { return selectOne(context.Background(), db) == nil },
			10*time.Second, 20*time.Millisecond, "the server never answered after Resume")
	})
}

// A stalled proxy holds a statement without failing it: it ends at its
// deadline, or goes through once the proxy resumes.
func TestProxyStallHoldsStatementsUntilResume(t *testing.T) {
	t.Parallel()
	eachProxied(t, func(t *testing.T, db *database.DB, p *Proxy) {
		p.Stall()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, selectOne(ctx, db), context.DeadlineExceeded)

		held := make(chan error, 1)
		go func() { held <- selectOne(context.Background(), db) }()
		select {
		case err := <-held:
			t.Fatalf("a statement went through a stalled proxy: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		p.Resume()
		select {
		case err := <-held:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the held statement never finished after Resume")
		}
	})
}
