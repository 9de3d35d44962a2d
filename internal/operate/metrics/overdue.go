package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// overdueCollector exports the overdue check's figures while this instance
// holds the check's lease: one instance among those on a database exports
// posting_posts_overdue, so a sum or a max over instances reads it right.
type overdueCollector struct {
	mu          sync.Mutex
	leader      bool
	count       int
	oldest      time.Duration
	countDesc   *prometheus.Desc
	oldestDesc  *prometheus.Desc
	expired     prometheus.Counter
	reannounced prometheus.Counter
}

func (c *overdueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.countDesc
	ch <- c.oldestDesc
}

func (c *overdueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leader {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.countDesc, prometheus.GaugeValue, float64(c.count))
	ch <- prometheus.MustNewConstMetric(c.oldestDesc, prometheus.GaugeValue, c.oldest.Seconds())
}

// ObserveOverdue records one overdue check (overdue.Result's fields): while
// leader, the gauges posting_posts_overdue and
// posting_posts_overdue_oldest_seconds show count and oldest; the counters
// add the posts expired and re-announced. A check that failed (ok false)
// keeps the gauges as they were.
func (m *Metrics) ObserveOverdue(leader, ok bool, count int, oldest time.Duration, expired, reannounced int) {
	c := m.overdue()
	c.expired.Add(float64(expired))
	c.reannounced.Add(float64(reannounced))
	if !ok && leader {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader, c.count, c.oldest = leader, count, oldest
}

// overdue registers the overdue collector and counters at their first use,
// so a process without the check (the worker) exports none of them.
func (m *Metrics) overdue() *overdueCollector {
	m.overdueOnce.Do(func() {
		c := &overdueCollector{
			countDesc: prometheus.NewDesc("posting_posts_overdue",
				"Posts more than POSTING_OVERDUE_AFTER past their scheduledAt and neither PUBLISHED, CANCELLED nor EXPIRED, "+
					"by the database's clock; exported by the one instance that runs the check.", nil, nil),
			oldestDesc: prometheus.NewDesc("posting_posts_overdue_oldest_seconds",
				"How long past its scheduledAt the oldest overdue post is; 0 when none is.", nil, nil),
			expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "posting_posts_expired_total",
				Help: "Posts the overdue check moved to EXPIRED: not published by their publishBy."}),
			reannounced: prometheus.NewCounter(prometheus.CounterOpts{Name: "posting_posts_reannounced_total",
				Help: "Reservation events the overdue check sent again for posts whose event was sent but made no publication."}),
		}
		m.registerer.MustRegister(c, c.expired, c.reannounced)
		m.overdueC = c
	})
	return m.overdueC
}

// WatchOverdue registers the overdue figures now, before the first check,
// so that the counters are exported from the start at 0.
func (m *Metrics) WatchOverdue() { m.overdue() }
