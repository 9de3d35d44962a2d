package databasetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Now reads db's clock, the one that decides which rows are old.
func Now(t testing.TB, db *gorm.DB) time.Time {
	t.Helper()
	now, err := database.Now(context.Background(), db)
	require.NoError(t, err)
	return now
}

// Delete is one DELETE statement: its table and the rows it removed.
type Delete struct {
	Table string
	Rows  int64
}

// Deletes records every DELETE statement run on db from now on; it
// returns a function that reads what was recorded so far.
func Deletes(t testing.TB, db *gorm.DB) func() []Delete {
	t.Helper()
	var mu sync.Mutex
	var got []Delete
	require.NoError(t, db.Callback().Delete().After("gorm:delete").Register("databasetest:deletes", func(tx *gorm.DB) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, Delete{tx.Statement.Table, tx.Statement.RowsAffected})
	}))
	return func() []Delete {
		mu.Lock()
		defer mu.Unlock()
		return append([]Delete{}, got...)
	}
}

// DeletedRows is the rows each recorded DELETE removed, in order.
func DeletedRows(ds []Delete) []int64 {
	rows := make([]int64, len(ds))
	for i, d := range ds {
		rows[i] = d.Rows
	}
	return rows
}

// Load reads the row of T whose primary key is id, failing t if there is
// none.
func Load[T any](t testing.TB, db *gorm.DB, id any) T {
	t.Helper()
	var row T
	require.NoError(t, db.First(&row, id).Error)
	return row
}

// Count returns how many rows of T the table holds.
func Count[T any](t testing.TB, db *gorm.DB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Model(new(T)).Count(&n).Error)
	return n
}
