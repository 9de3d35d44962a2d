package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Every outcome the worker reports (worker.Outcome*) is a label value of
// posting_worker_events_consumed_total as docs/operations.md lists it, not
// folded into "other": a CREATED or UPDATED event the worker ignores is
// counted outcome="ignored".
func TestObserveConsumedKeepsEveryWorkerOutcome(t *testing.T) {
	t.Parallel()
	m := metrics.New(databasetest.NewSQLite(t).DB, "test-1")
	outcomes := []string{worker.OutcomeProcessed, worker.OutcomeDuplicate, worker.OutcomeOutOfOrder,
		worker.OutcomeRefused, worker.OutcomeIgnored}
	for _, o := range outcomes {
		m.ObserveConsumed("POSTING_EVENT", o)
	}
	f := scrape(t, m.Handler())
	for _, o := range outcomes {
		require.Equal(t, 1.0, value(t, f, "posting_worker_events_consumed_total",
			map[string]string{"event_type": "POSTING_EVENT", "outcome": o}), o)
	}
	for _, s := range f["posting_worker_events_consumed_total"].GetMetric() {
		for _, l := range s.GetLabel() {
			require.False(t, l.GetName() == "outcome" && l.GetValue() == "other", "a worker outcome counted as other")
		}
	}
}
