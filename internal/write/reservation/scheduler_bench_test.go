package reservation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// BenchmarkSchedulerMarks10000 measures one scheduler run marking 10,000
// due posts WORKING with their reservation events, with batches of 100
// (the default) and 1000, on each database. Each iteration starts from the same 10,000
// RESERVED posts and an empty outbox.
func BenchmarkSchedulerMarks10000(b *testing.B) {
	const n = 10000
	for _, d := range databasetest.Dialects {
		for _, batch := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", d, batch), func(b *testing.B) {
				db := databasetest.New(b, d)
				now := databasetest.Now(b, db.DB)
				posts := make([]reservation.Post, n)
				for i := range posts {
					posts[i] = reservation.Post{Title: "t", Content: "c", Status: reservation.StatusReserved,
						ScheduledAt: now.Add(time.Duration(i%60) * time.Second), CreatedAt: now, UpdatedAt: now,
						Version: optimisticlock.Version{Int64: 1, Valid: true}}
				}
				if err := db.CreateInBatches(posts, 500).Error; err != nil {
					b.Fatal(err)
				}
				s, err := reservation.NewScheduler(db.DB, reservation.SchedulerConfig{Lead: 5 * time.Minute, BatchSize: batch, Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
				var elapsed time.Duration
				for b.Loop() {
					b.StopTimer()
					if err := db.Exec("DELETE FROM outbox").Error; err != nil {
						b.Fatal(err)
					}
					if err := db.Exec("UPDATE posts SET status = ?, version = 1", reservation.StatusReserved).Error; err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					start := time.Now()
					res, err := s.RunOnce(context.Background())
					elapsed += time.Since(start)
					if err != nil || res.Marked != n {
						b.Fatalf("marked %d of %d: %v", res.Marked, n, err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "posts/s")
			})
		}
	}
}
