package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// sendResults are the result label values of posting_broker_messages_total,
// all exported from the start at 0.
var sendResults = []string{"acked", "rejected", "unavailable"}

// brokerSendCollector times the relay's sends and counts their messages,
// whichever the broker (Kafka or RabbitMQ). It exports them as
// posting_broker_send_duration_seconds and posting_broker_messages_total
// and, for one release, again under their former names
// posting_kafka_send_duration_seconds and posting_kafka_messages_total,
// which counted RabbitMQ sends too. Each series is read once per scrape and
// written under both names, so a scrape shows them equal.
type brokerSendCollector struct {
	duration                         prometheus.Histogram   // not registered: read by Collect
	messages                         *prometheus.CounterVec // not registered: read by Collect
	durationDesc, messagesDesc       *prometheus.Desc
	oldDurationDesc, oldMessagesDesc *prometheus.Desc // deprecated
}

func newBrokerSendCollector() *brokerSendCollector {
	const (
		durationHelp = "Duration of one synchronous batch send to the broker (Kafka or RabbitMQ), until every message has an outcome."
		messagesHelp = "Messages sent to the broker (Kafka or RabbitMQ) by result: acked, rejected, unavailable."
		deprecated   = "Deprecated: use %s; removed in the next release. The same values, RabbitMQ sends included."
	)
	c := &brokerSendCollector{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "posting_broker_send_duration_seconds",
			Help: durationHelp, Buckets: prometheus.DefBuckets}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "posting_broker_messages_total",
			Help: messagesHelp}, []string{"result"}),
		durationDesc: prometheus.NewDesc("posting_broker_send_duration_seconds", durationHelp, nil, nil),
		messagesDesc: prometheus.NewDesc("posting_broker_messages_total", messagesHelp, []string{"result"}, nil),
		oldDurationDesc: prometheus.NewDesc("posting_kafka_send_duration_seconds",
			fmt.Sprintf(deprecated, "posting_broker_send_duration_seconds"), nil, nil),
		oldMessagesDesc: prometheus.NewDesc("posting_kafka_messages_total",
			fmt.Sprintf(deprecated, "posting_broker_messages_total"), []string{"result"}, nil),
	}
	for _, res := range sendResults {
		c.messages.WithLabelValues(res)
	}
	return c
}

// observe records one send that took d, with its messages' outcomes.
func (c *brokerSendCollector) observe(d time.Duration, acked, rejected, unavailable int) {
	c.duration.Observe(d.Seconds())
	c.messages.WithLabelValues("acked").Add(float64(acked))
	c.messages.WithLabelValues("rejected").Add(float64(rejected))
	c.messages.WithLabelValues("unavailable").Add(float64(unavailable))
}

func (c *brokerSendCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.durationDesc
	ch <- c.messagesDesc
	ch <- c.oldDurationDesc
	ch <- c.oldMessagesDesc
}

func (c *brokerSendCollector) Collect(ch chan<- prometheus.Metric) {
	var m dto.Metric
	if err := c.duration.Write(&m); err != nil {
		ch <- prometheus.NewInvalidMetric(c.durationDesc, err)
		return
	}
	h := m.GetHistogram()
	buckets := make(map[float64]uint64, len(h.GetBucket()))
	for _, b := range h.GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for _, desc := range []*prometheus.Desc{c.durationDesc, c.oldDurationDesc} {
		ch <- prometheus.MustNewConstHistogram(desc, h.GetSampleCount(), h.GetSampleSum(), buckets)
	}
	for _, res := range sendResults {
		m.Reset()
		if err := c.messages.WithLabelValues(res).Write(&m); err != nil {
			ch <- prometheus.NewInvalidMetric(c.messagesDesc, err)
			continue
		}
		for _, desc := range []*prometheus.Desc{c.messagesDesc, c.oldMessagesDesc} {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, m.GetCounter().GetValue(), res)
		}
	}
}
