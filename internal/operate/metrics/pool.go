package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// poolCollector reads the database pool's counters at each scrape: a pool
// that opens far more connections than its maximum churns (it keeps too
// few idle for the load).
type poolCollector struct {
	db                    *gorm.DB
	opened, open, maxOpen *prometheus.Desc
}

func newPoolCollector(db *gorm.DB) *poolCollector {
	return &poolCollector{
		db: db,
		opened: prometheus.NewDesc("posting_database_connections_opened_total",
			"Database connections the pool opened since start: open now plus closed as idle, idle too long or too old "+
				"(sql.DBStats; connections dropped as broken are not counted).", nil, nil),
		open: prometheus.NewDesc("posting_database_connections_open",
			"Database connections open now, in use or idle.", nil, nil),
		maxOpen: prometheus.NewDesc("posting_database_connections_max",
			"The pool's maximum of open connections (POSTING_DATABASE_MAX_CONNS in force).", nil, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.opened
	ch <- c.open
	ch <- c.maxOpen
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	sqlDB, err := c.db.DB()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.opened, err)
		return
	}
	s := sqlDB.Stats()
	ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(database.ConnectionsOpened(s)))
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.OpenConnections))
	ch <- prometheus.MustNewConstMetric(c.maxOpen, prometheus.GaugeValue, float64(s.MaxOpenConnections))
}
