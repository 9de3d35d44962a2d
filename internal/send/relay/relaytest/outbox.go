package relaytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// Seed writes perPost events for each of posts post ids, interleaved the
// way real traffic is, in batches, and returns the rows in id order.
func Seed(t testing.TB, db *gorm.DB, posts, perPost int, at time.Time) []outbox.Message {
	t.Helper()
	var rows []*outbox.Message
	for round := range perPost {
		for p := 1; p <= posts; p++ {
			m, err := outbox.NewMessage(reservationtest.Outbox(t, event.PostingEvent, int64(p), at, event.PostingEventFields{
				Action: event.ActionUpdated, Status: "RESERVED", ScheduledAt: at.Add(time.Duration(round+1) * time.Minute)}))
			require.NoError(t, err)
			// As every row written by the API or the scheduler has one.
			tp := fmt.Sprintf("00-%032x-%016x-00", p*1000+round+1, round+1)
			m.Traceparent = &tp
			rows = append(rows, m)
		}
	}
	require.NoError(t, db.CreateInBatches(rows, 1000).Error)
	out := make([]outbox.Message, len(rows))
	for i, m := range rows {
		out[i] = *m
	}
	return out
}

// CountByStatus counts the outbox rows by status.
func CountByStatus(t testing.TB, db *gorm.DB) map[outbox.Status]int64 {
	t.Helper()
	var rows []struct {
		Status outbox.Status
		N      int64
	}
	require.NoError(t, db.Model(&outbox.Message{}).Select("status, COUNT(*) AS n").Group("status").Scan(&rows).Error)
	out := map[outbox.Status]int64{}
	for _, r := range rows {
		out[r.Status] = r.N
	}
	return out
}
