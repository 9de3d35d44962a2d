package metrics_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// However often and however many at once scrape, the outbox is counted at
// most once per refresh interval: 20 scrape loops within one interval cost
// one round of outbox queries, and the next interval one more, with the
// counts it then finds.
func TestScrapesReadTheOutboxAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var outboxReads atomic.Int64
		require.NoError(t, db.Callback().Query().After("gorm:query").Register("count_outbox_reads", func(tx *gorm.DB) {
			if tx.Statement.Table == "outbox" {
				outboxReads.Add(1)
			}
		}))
		require.NoError(t, db.Callback().Raw().After("gorm:raw").Register("count_outbox_raw", func(tx *gorm.DB) {
			if tx.Statement.Table == "outbox" {
				outboxReads.Add(1)
			}
		}))
		const interval = 2 * time.Second
		m := metrics.New(db.DB, "test-1", metrics.WithRefreshInterval(interval))
		first := scrape(t, m.Handler())
		perRound := outboxReads.Load()
		require.Positive(t, perRound, "a scrape reads the outbox")
		require.Equal(t, 0.0, value(t, first, "posting_outbox_rows", map[string]string{"status": "PENDING"}))

		reservationtest.Append(t, db.DB, 1, time.Now())
		start := time.Now()
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					scrape(t, m.Handler())
				}
			}()
		}
		wg.Wait()
		if time.Since(start) < interval {
			require.Equal(t, perRound, outboxReads.Load(), "100 scrapes within the interval read nothing more")
			require.Equal(t, 0.0, value(t, scrape(t, m.Handler()), "posting_outbox_rows", map[string]string{"status": "PENDING"}),
				"served from the last read")
		}
		require.Eventually(t, func() bool {
			return value(t, scrape(t, m.Handler()), "posting_outbox_rows", map[string]string{"status": "PENDING"}) == 1
		}, 3*interval, 50*time.Millisecond, "read anew after the interval")
		require.LessOrEqual(t, outboxReads.Load(), perRound*int64(2+time.Since(start)/interval))
	})
}
