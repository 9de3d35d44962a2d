// Package reservationtest writes and counts posts for the tests of the
// parts that take posts over from the scheduler (the worker, the
// consumers).
package reservationtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// InsertWorking writes a WORKING post due at at, as the scheduler leaves
// it.
func InsertWorking(t testing.TB, db *gorm.DB, at time.Time) *reservation.Post {
	t.Helper()
	now := database.Normalize(time.Now())
	p := &reservation.Post{Title: "t", Content: "c", Status: reservation.StatusWorking,
		ScheduledAt: database.Normalize(at), CreatedAt: now, UpdatedAt: now}
	require.NoError(t, db.Create(p).Error)
	return p
}

// Count is how many posts of status db holds.
func Count(t testing.TB, db *gorm.DB, status reservation.Status) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Model(&reservation.Post{}).Where("status = ?", status).Count(&n).Error)
	return n
}
