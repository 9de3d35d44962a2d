package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/metrics"
	"github.com/postingsvc/posting/reservation"
)

// BenchmarkCreateLatencyWhileScraped measures a create's latency (the post
// and its event in one transaction, on MariaDB) on an outbox of 500,000 SENT
// rows, three ways in one run: nobody scraping, 20 loops each scraping
// /metrics every 500 ms with the refresh interval (the outbox counted at most once per 10 s), and
// the same loops with every scrape counting the outbox (how /metrics read it
// before). It prints each p50 and p99 and the p99 ratios against the quiet
// run; it asserts no time.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 go test -run '^$' -bench CreateLatencyWhileScraped -benchtime 1x ./metrics/
func BenchmarkCreateLatencyWhileScraped(b *testing.B) {
	db := databasetest.NewMySQL(b)
	ctx := context.Background()
	const sent = 500_000
	require.NoError(b, db.Exec(`INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, next_attempt_at, sent_at)
		SELECT UUID(), 'POSTING_EVENT', seq, '{}', NOW(6), 'SENT', NOW(6), NOW(6) FROM seq_1_to_500000`).Error)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(b, err)
	createLatencies := func(n int) []time.Duration {
		lat := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			_, err := svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
			require.NoError(b, err)
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat
	}
	scraped := func(opts ...metrics.Option) []time.Duration {
		m := metrics.New(db.DB, "bench", opts...)
		srv := httptest.NewServer(m.Handler())
		defer srv.Close()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if resp, err := http.Get(srv.URL); err == nil {
						resp.Body.Close()
					}
					time.Sleep(500 * time.Millisecond) // a scrape loop at a fixed pace, the same in each run
				}
			}()
		}
		lat := createLatencies(300)
		close(stop)
		wg.Wait()
		return lat
	}
	pct := func(lat []time.Duration, p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
	for range b.N {
		quiet := createLatencies(300)
		cachedLat := scraped()
		everyScrape := scraped(metrics.WithRefreshInterval(time.Nanosecond))
		for _, r := range []struct {
			name string
			lat  []time.Duration
		}{{"quiet", quiet}, {"scraped, read once per 10 s", cachedLat}, {"scraped, read at every scrape", everyScrape}} {
			fmt.Printf("%-32s p50 %8s  p99 %8s  p99 vs quiet %.2f\n", r.name, pct(r.lat, 0.5).Round(10*time.Microsecond),
				pct(r.lat, 0.99).Round(10*time.Microsecond), float64(pct(r.lat, 0.99))/float64(pct(quiet, 0.99)))
		}
		b.ReportMetric(float64(pct(cachedLat, 0.99))/float64(pct(quiet, 0.99)), "p99-cached/quiet")
		b.ReportMetric(float64(pct(everyScrape, 0.99))/float64(pct(quiet, 0.99)), "p99-every-scrape/quiet")
	}
}
