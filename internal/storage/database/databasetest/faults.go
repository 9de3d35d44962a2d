package databasetest

import (
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
)

// Statements are kinds of statement a hook applies to, one per chain of
// gorm callbacks.
type Statements uint8

const (
	// StmtQuery is Find, First, Take and Count.
	StmtQuery Statements = 1 << iota
	// StmtRow is Raw(...).Scan, Row and Rows.
	StmtRow
	// StmtExec is Exec (gorm's "raw" chain).
	StmtExec
	// StmtCreate is Create.
	StmtCreate
	// StmtUpdate is Update, Updates and Save of a row with a key.
	StmtUpdate
	// StmtDelete is Delete.
	StmtDelete
	// StmtAll is every kind.
	StmtAll = StmtQuery | StmtRow | StmtExec | StmtCreate | StmtUpdate | StmtDelete
)

// Before runs fn before each statement of kinds through db from now on: the
// moment to fail it (tx.AddError), stall it, or slip another write in
// (tx.Session(&gorm.Session{NewDB: true})). Register it before the code under
// test runs on db: gorm's callbacks are not safe to change while in use.
func Before(t testing.TB, db *gorm.DB, kinds Statements, fn func(tx *gorm.DB)) {
	t.Helper()
	register(t, db, kinds, true, fn)
}

// After runs fn after each statement of kinds through db from now on
// (tx.Error holds the statement's error): the moment between a read and the
// write that follows it. Register it as Before says.
func After(t testing.TB, db *gorm.DB, kinds Statements, fn func(tx *gorm.DB)) {
	t.Helper()
	register(t, db, kinds, false, fn)
}

// Fail makes each statement of kinds through db for which when returns true
// fail with err before it reaches the database; a nil when matches them all.
// driver.ErrBadConn fails it as a lost connection would.
func Fail(t testing.TB, db *gorm.DB, kinds Statements, err error, when func(tx *gorm.DB) bool) {
	t.Helper()
	Before(t, db, kinds, func(tx *gorm.DB) {
		if when == nil || when(tx) {
			_ = tx.AddError(err)
		}
	})
}

// Outage makes every statement of kinds through db fail with
// driver.ErrBadConn while the returned switch is on (it starts off): the
// database cut off from this pool, or restarting, as the code under test
// sees it. Proxy does the same on the wire for code with pools of its own.
func Outage(t testing.TB, db *gorm.DB, kinds Statements) *atomic.Bool {
	t.Helper()
	var down atomic.Bool
	Fail(t, db, kinds, driver.ErrBadConn, func(*gorm.DB) bool { return down.Load() })
	return &down
}

// Once is a condition for Fail that holds only the first time when does:
// one statement fails, its retry goes through.
func Once(when func(tx *gorm.DB) bool) func(tx *gorm.DB) bool {
	var done atomic.Bool
	return func(tx *gorm.DB) bool { return when(tx) && done.CompareAndSwap(false, true) }
}

// SQLStarts is a condition for Fail: the statement's SQL starts with prefix.
// Only an Exec has its SQL before it runs.
func SQLStarts(prefix string) func(tx *gorm.DB) bool {
	return func(tx *gorm.DB) bool { return strings.HasPrefix(tx.Statement.SQL.String(), prefix) }
}

// Table is a condition for Fail: the statement is on table.
func Table(table string) func(tx *gorm.DB) bool {
	return func(tx *gorm.DB) bool { return tx.Statement.Table == table }
}

// chain is one of gorm's callback chains, whose types gorm does not export.
type chain[C interface {
	Register(string, func(*gorm.DB)) error
}] interface {
	Before(string) C
	After(string) C
}

func register(t testing.TB, db *gorm.DB, kinds Statements, before bool, fn func(tx *gorm.DB)) {
	t.Helper()
	require.NotZero(t, kinds, "no kind of statement to hook")
	cb := db.Callback()
	name := freeName(cb.Query(), cb.Row(), cb.Raw(), cb.Create(), cb.Update(), cb.Delete())
	for _, err := range []error{
		hook(cb.Query(), kinds&StmtQuery, "gorm:query", before, name, fn),
		hook(cb.Row(), kinds&StmtRow, "gorm:row", before, name, fn),
		hook(cb.Raw(), kinds&StmtExec, "gorm:raw", before, name, fn),
		hook(cb.Create(), kinds&StmtCreate, "gorm:create", before, name, fn),
		hook(cb.Update(), kinds&StmtUpdate, "gorm:update", before, name, fn),
		hook(cb.Delete(), kinds&StmtDelete, "gorm:delete", before, name, fn),
	} {
		require.NoError(t, err, "register %s", name)
	}
}

// freeName is the first databasetest:hook_N that no chain holds yet.
func freeName(chains ...interface{ Get(string) func(*gorm.DB) }) string {
	for i := 1; ; i++ {
		name := fmt.Sprintf("databasetest:hook_%d", i)
		if !slices.ContainsFunc(chains, func(c interface{ Get(string) func(*gorm.DB) }) bool { return c.Get(name) != nil }) {
			return name
		}
	}
}

// hook registers fn as name before or after gorm's own callback at in c,
// when kind is not zero.
func hook[C interface {
	Register(string, func(*gorm.DB)) error
}](c chain[C], kind Statements, at string, before bool, name string, fn func(*gorm.DB)) error {
	switch {
	case kind == 0:
		return nil
	case before:
		return c.Before(at).Register(name, fn)
	default:
		return c.After(at).Register(name, fn)
	}
}
