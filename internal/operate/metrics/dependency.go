package metrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// dependencyCollector pings, at each scrape, what the process cannot work
// without (the database, the broker), so an alert needs no probe of its own
// and says which one is down, from the service's side of the network.
type dependencyCollector struct {
	timeout time.Duration
	up      *prometheus.Desc

	mu    sync.Mutex
	names []string
	pings []func(context.Context) error
}

func newDependencyCollector(timeout time.Duration) *dependencyCollector {
	return &dependencyCollector{timeout: timeout,
		up: prometheus.NewDesc("posting_dependency_up",
			"1 when the dependency (database, kafka, rabbitmq) answered its ping at this scrape, else 0.",
			[]string{"dependency"}, nil)}
}

func (c *dependencyCollector) add(name string, ping func(context.Context) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
	c.pings = append(c.pings, ping)
}

func (c *dependencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up }

// Collect pings every dependency at once, so the scrape takes one timeout at
// most however many are down.
func (c *dependencyCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	names, pings := c.names, c.pings
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	up := make([]float64, len(pings))
	var wg sync.WaitGroup
	for i, ping := range pings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ping(ctx) == nil {
				up[i] = 1
			}
		}()
	}
	wg.Wait()
	for i, name := range names {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up[i], name)
	}
}

// consumerLagCollector reads a consumer group's lag at each scrape; when the
// read fails it reports nothing rather than a lag of 0 (the broker's
// posting_dependency_up says why).
type consumerLagCollector struct {
	timeout      time.Duration
	group, topic string
	read         func(context.Context) (map[int32]int64, error)
	lag          *prometheus.Desc
}

func (c *consumerLagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.lag }

func (c *consumerLagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	lag, err := c.read(ctx)
	if err != nil {
		return
	}
	for p, n := range lag {
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(n),
			c.group, c.topic, strconv.Itoa(int(p)))
	}
}

// WatchDependency adds name (database, kafka, rabbitmq) to
// posting_dependency_up: ping is called at each scrape, all dependencies at
// once, bounded by the scrape timeout, and the gauge is 1 when it returned
// nil. Safe to call while being scraped.
func (m *Metrics) WatchDependency(name string, ping func(context.Context) error) {
	m.deps.add(name, ping)
}

// WatchConsumerLag exports posting_kafka_consumer_lag_messages{group, topic,
// partition}: the events of topic that group has not committed yet, read
// at each scrape (bounded by the scrape timeout) by read, which is
// kafka.LagReader's Lag. Every worker of a group reports the same numbers:
// aggregate them with max, not sum. Call it once per process.
func (m *Metrics) WatchConsumerLag(group, topic string, read func(context.Context) (map[int32]int64, error)) {
	m.registerer.MustRegister(cached(&consumerLagCollector{timeout: m.scrapeTimeout, group: group, topic: topic, read: read,
		lag: prometheus.NewDesc("posting_kafka_consumer_lag_messages",
			"Events of the topic the consumer group has not committed yet, by partition (newest offset minus committed), read from the cluster.",
			[]string{"group", "topic", "partition"}, nil)}, m.refresh, time.Now))
}
