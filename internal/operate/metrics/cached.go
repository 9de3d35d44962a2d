package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultRefreshInterval is how long the figures read from the database or
// the brokers at a scrape (outbox counts, dependency pings, consumer lag)
// are served again before they are read anew.
const DefaultRefreshInterval = 10 * time.Second

// cachedCollector collects its inner collector at most once per interval,
// however often and however many at once scrape: a scrape within the
// interval gets the metrics of the last collection, and scrapes that
// arrive while a collection runs wait for it and share it. /metrics needs
// no authentication, so a loop of scrapes must not turn into a loop of
// outbox counts (with 500,000 SENT rows one costs 100 ms of the database).
type cachedCollector struct {
	inner    prometheus.Collector
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex // held while collecting
	at      time.Time
	metrics []prometheus.Metric
}

func cached(inner prometheus.Collector, interval time.Duration, now func() time.Time) *cachedCollector {
	return &cachedCollector{inner: inner, interval: interval, now: now}
}

func (c *cachedCollector) Describe(ch chan<- *prometheus.Desc) { c.inner.Describe(ch) }

func (c *cachedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics == nil || c.now().Sub(c.at) >= c.interval {
		fresh := make(chan prometheus.Metric, 64)
		done := make(chan struct{})
		var got []prometheus.Metric
		go func() {
			for m := range fresh {
				got = append(got, m)
			}
			close(done)
		}()
		c.inner.Collect(fresh)
		close(fresh)
		<-done
		if got == nil {
			got = []prometheus.Metric{}
		}
		c.metrics, c.at = got, c.now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}
