package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Two serves on one PostgreSQL database: a create on either wakes the
// other's relay at once (its listener does not take the other's
// notification for its own), long before the relay's 10 s interval.
func TestTwoServesOnPostgresWakeEachOthersRelay(t *testing.T) {
	t.Parallel()
	url := databasetest.PostgresURL(t, "wake2")
	// One broker for both. (The same instance id would fence the
	// relays' transactional producers, a separate matter.)
	b := kafkatest.Start(t)
	var logs [2]*logtest.Buffer
	addrs := make([]string, 2)
	for i := range addrs {
		logs[i] = &logtest.Buffer{}
		addrs[i] = freeAddr(t)
		runInProcess(t, logs[i], "serve", "--http-addr", addrs[i], "--data-dir", t.TempDir(),
			"--database-url", url, "--relay-interval", "10s", "--instance-id", fmt.Sprintf("wake-%d", i), "--kafka-brokers", b.Addr)
		require.Eventually(t, func() bool { code, _ := httpGet(addrs[i], "/readyz"); return code == http.StatusOK },
			60*time.Second, 50*time.Millisecond, "serve never became ready: %s", logs[i])
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range logs {
				for _, l := range strings.Split(logs[i].String(), "\n") {
					if strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
						t.Logf("serve %d: %s", i, l)
					}
				}
			}
		}
	})
	polls := func(addr string) float64 { return counter(t, scrape(t, addr), "posting_relay_polls_total") }
	sent := func(addr string) float64 { return counter(t, scrape(t, addr), "posting_relay_events_sent_total") }
	// Warm up: each relay has sent an event (a relay's first send can find
	// the broker not ready and back off for an interval, wakes or not).
	require.Eventually(t, func() bool {
		for _, a := range addrs {
			createPost(t, a, time.Now().Add(24*time.Hour))
		}
		time.Sleep(200 * time.Millisecond)
		return sent(addrs[0]) > 0 && sent(addrs[1]) > 0
	}, 60*time.Second, 10*time.Millisecond, "both relays sent an event")
	// Both listeners wake their relays once they listen: wait until the
	// polls stop moving.
	last := []float64{polls(addrs[0]), polls(addrs[1])}
	require.Eventually(t, func() bool {
		time.Sleep(500 * time.Millisecond)
		now := []float64{polls(addrs[0]), polls(addrs[1])}
		moved := now[0] != last[0] || now[1] != last[1]
		last = now
		return !moved
	}, 30*time.Second, time.Millisecond)

	for i, from := range []int{1, 0, 1, 0} {
		other := addrs[1-from]
		before := polls(other)
		createPost(t, addrs[from], time.Now().Add(24*time.Hour))
		ok := assert.Eventually(t, func() bool { return polls(other) > before }, 2*time.Second, 10*time.Millisecond,
			"create %d on serve %d: the other serve's relay was not woken", i, from)
		if !ok {
			for _, a := range addrs {
				for _, line := range strings.Split(scrape(t, a), "\n") {
					if strings.HasPrefix(line, "posting_relay_polls_total") || strings.HasPrefix(line, "posting_relay_events_sent_total") {
						t.Logf("%s %s", a, line)
					}
				}
			}
			t.FailNow()
		}
	}
}
