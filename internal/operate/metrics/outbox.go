package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// outboxCollector reads the outbox table at each scrape, so the gauges are
// the database's truth shared by every instance, not one process's view.
// When the queries fail or time out it reports posting_outbox_stats_up 0
// and leaves the other gauges out rather than showing stale numbers.
type outboxCollector struct {
	db      *gorm.DB
	now     func() time.Time
	timeout time.Duration

	up, rows, oldest, discarded, blocked *prometheus.Desc
}

func newOutboxCollector(db *gorm.DB, now func() time.Time, timeout time.Duration) *outboxCollector {
	return &outboxCollector{
		db: db, now: now, timeout: timeout,
		up: prometheus.NewDesc("posting_outbox_stats_up",
			"1 when the outbox table could be read for this scrape, else 0.", nil, nil),
		rows: prometheus.NewDesc("posting_outbox_rows",
			"Outbox rows by status (FAIL includes discarded rows).", []string{"status"}, nil),
		oldest: prometheus.NewDesc("posting_outbox_oldest_pending_age_seconds",
			"Age of the oldest PENDING or RETRY row by created; 0 when none waits.", nil, nil),
		discarded: prometheus.NewDesc("posting_outbox_discarded_rows",
			"FAIL rows an operator discarded; FAIL minus this is what waits for a person.", nil, nil),
		blocked: prometheus.NewDesc("posting_outbox_blocked_rows",
			"PENDING and RETRY rows held behind an earlier FAIL row of the same post.", nil, nil),
	}
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.rows
	ch <- c.oldest
	ch <- c.discarded
	ch <- c.blocked
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := outbox.Stats(ctx, c.db, c.now())
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, s := range outbox.Statuses {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(st.Counts[s]), string(s))
	}
	age := 0.0
	if st.OldestWaiting != nil {
		age = st.OldestWaiting.AgeSeconds
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(c.discarded, prometheus.GaugeValue, float64(st.Discarded))
	ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(st.Blocked))
}
