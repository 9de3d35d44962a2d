package main

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// counter sums the samples of the counter name in a /metrics exposition
// (read by Prometheus' own text parser) whose labels hold each name, value
// pair of labels (with none, every sample), 0 when there are none.
func counter(t *testing.T, exposition, name string, labels ...string) float64 {
	t.Helper()
	require.Zero(t, len(labels)%2, "labels: name, value pairs")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	require.NoError(t, err)
	f, ok := fams[name]
	if !ok {
		return 0
	}
	require.Equal(t, dto.MetricType_COUNTER, f.GetType(), "%s's type", name)
	sum := 0.0
samples:
	for _, m := range f.GetMetric() {
		held := map[string]string{}
		for _, l := range m.GetLabel() {
			held[l.GetName()] = l.GetValue()
		}
		for i := 0; i < len(labels); i += 2 {
			if v, ok := held[labels[i]]; !ok || v != labels[i+1] {
				continue samples
			}
		}
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// On PostgreSQL a create wakes the instance's relay once, in the process at
// its commit: one poll claims and sends its event, and the one that follows
// it at once (it writes the acknowledgement and looks for the post's next
// event) finds nothing. The NOTIFY the commit also sends, for the other
// instances' relays, comes back to this instance's listener, which skips it
// instead of making another poll that finds nothing. (Whether the echo would
// add a poll depends on when it arrives; TestListenerSkipsItsOwnOriginAndWakesForOthers
// checks the skip itself.)
func TestServeOnPostgresPollsTwicePerCreate(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--database-url", databasetest.PostgresURL(t, "wake"), "--relay-interval", "30s")
	read := func() (polls, sent float64) {
		e := scrape(t, addr)
		return counter(t, e, "posting_relay_polls_total", "result", "ok"), counter(t, e, "posting_relay_events_sent_total")
	}
	// The listener wakes the relay once it listens: wait until the polls
	// stop moving.
	polls, _ := read()
	require.Eventually(t, func() bool {
		time.Sleep(500 * time.Millisecond)
		now, _ := read()
		moved := now != polls
		polls = now
		return !moved
	}, 30*time.Second, time.Millisecond)

	for i := range 3 {
		before, sentBefore := read()
		createPost(t, addr, time.Now().Add(24*time.Hour))
		require.Eventually(t, func() bool { _, sent := read(); return sent == sentBefore+1 }, 10*time.Second, 10*time.Millisecond,
			"create %d: its event not sent", i)
		time.Sleep(500 * time.Millisecond) // a third poll, if any, has come by now
		after, _ := read()
		require.Equal(t, before+2, after, "create %d: relay polls", i)
	}
}
