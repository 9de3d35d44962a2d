package relaybench_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/operate/bench/relaybench"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// BenchmarkRelayDefaultVsBestBatch prints, on each dialect, the relay's
// drain of a 10,000-row backlog to the in-process Kafka broker with its
// default settings (batch 100, growing while polls come back full) beside
// the same drain at fixed batches of 100, 250, 500, 1000 and 2000, and the
// ratio of the default to the best of them. Each drain gets a fresh
// database.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 \
//	  go test -run '^$' -bench RelayDefaultVsBestBatch -benchtime 1x ./internal/operate/bench/relaybench/
func BenchmarkRelayDefaultVsBestBatch(b *testing.B) {
	const backlog = 10000
	ctx := context.Background()
	for _, dialect := range databasetest.Dialects {
		b.Run(string(dialect), func(b *testing.B) {
			producer := newProducer(b, kafkatest.Start(b))
			def := once(b, dialect, backlog, func(db *gorm.DB) (relaybench.Result, error) {
				return relaybench.Default(ctx, db, producer)
			}).PerSecond()
			var best float64
			bestBatch := 0
			var all []string
			for _, batch := range []int{100, 250, 500, 1000, 2000} {
				v := once(b, dialect, backlog, func(db *gorm.DB) (relaybench.Result, error) {
					return relaybench.Relay(ctx, db, producer, batch)
				}).PerSecond()
				all = append(all, fmt.Sprintf("%d: %.0f", batch, v))
				if v > best {
					best, bestBatch = v, batch
				}
			}
			b.ReportMetric(def, "default_ev/s")
			b.ReportMetric(best, "best_fixed_ev/s")
			b.ReportMetric(def/best, "default/best")
			b.Logf("%s backlog %d: default %.0f ev/s = %.2f x the best fixed batch (%d, %.0f ev/s); fixed %s",
				dialect, backlog, def, def/best, bestBatch, best, strings.Join(all, ", "))
		})
	}
}
