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

	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// BenchmarkCreateLatencyWhileScraped measures a create's latency (the post
// and its event in one transaction, on MariaDB) on an outbox of 500,000 SENT
// rows, three ways in one run, creating one after the other for 6 s each:
// nobody scraping, 20 loops each scraping /metrics every 500 ms with the
// refresh interval (the outbox counted at most once per 10 s), and the same
// loops with every scrape counting the outbox (how /metrics read it
// before). It prints each p50 and p99 and the p99 ratios against the quiet
// run; it asserts no time.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 go test -run '^$' -bench CreateLatencyWhileScraped -benchtime 1x ./internal/operate/metrics/
func BenchmarkCreateLatencyWhileScraped(b *testing.B) {
	db := databasetest.NewMySQL(b)
	ctx := context.Background()
	const sent = 500_000
	require.NoError(b, db.Exec(`INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, next_attempt_at, sent_at)
		SELECT UUID(), 'POSTING_EVENT', seq, '{}', NOW(6), 'SENT', NOW(6), NOW(6) FROM seq_1_to_500000`).Error)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(b, err)
	// Each phase creates for a while, so that every scrape loop scrapes
	// about a dozen times during it (300 creates took 0.1 s: the loops had
	// scraped once before the creates began).
	const phase = 6 * time.Second
	createLatencies := func() []time.Duration {
		var lat []time.Duration
		for end := time.Now().Add(phase); time.Now().Before(end); {
			start := time.Now()
			_, err := svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
			require.NoError(b, err)
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat
	}
	var scrapeMu sync.Mutex
	var scrapes []time.Duration // how long each scrape of the last phase took
	scraped := func(opts ...metrics.Option) []time.Duration {
		scrapeMu.Lock()
		scrapes = scrapes[:0]
		scrapeMu.Unlock()
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
					start := time.Now()
					if resp, err := http.Get(srv.URL); err == nil {
						resp.Body.Close()
					}
					scrapeMu.Lock()
					scrapes = append(scrapes, time.Since(start))
					scrapeMu.Unlock()
					time.Sleep(500 * time.Millisecond) // a scrape loop at a fixed pace, the same in each run
				}
			}()
		}
		lat := createLatencies()
		close(stop)
		wg.Wait()
		return lat
	}
	pct := func(lat []time.Duration, p float64) time.Duration { return lat[int(float64(len(lat)-1)*p)] }
	for range b.N {
		quiet := createLatencies()
		cachedLat := scraped()
		scrapeP50 := func() time.Duration {
			scrapeMu.Lock()
			defer scrapeMu.Unlock()
			slices.Sort(scrapes)
			return scrapes[len(scrapes)/2].Round(10 * time.Microsecond)
		}
		fmt.Printf("scrapes once per 10 s: %d, p50 %s\n", len(scrapes), scrapeP50())
		everyScrape := scraped(metrics.WithRefreshInterval(time.Nanosecond))
		fmt.Printf("scrapes reading each time: %d, p50 %s\n", len(scrapes), scrapeP50())
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
