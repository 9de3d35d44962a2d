package relay

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
)

// While the broker cannot be reached the pause between polls doubles from
// the interval up to OutageBackoffMax, so an outage does not turn into a
// poll every interval (and a write transaction each) against a dead broker.
func TestOutageBackoffDoubles(t *testing.T) {
	t.Parallel()
	b := setup(t, databasetest.NewSQLite(t))
	b.send.SetDown(unreachable)
	b.append(t, 1)
	var (
		mu    sync.Mutex
		polls []time.Time
	)
	r, err := New(b.store, b.send, Config{InstanceID: "a", Interval: 20 * time.Millisecond,
		StaleAfter: time.Minute, OutageBackoffMax: time.Second, Logger: slog.New(slog.DiscardHandler),
		Observe: func(res Result, _ time.Duration, _ error) {
			if res.Unavailable {
				mu.Lock()
				polls = append(polls, time.Now())
				mu.Unlock()
			}
		}})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(polls) >= 7 }, 30*time.Second, 5*time.Millisecond)
	r.Stop()
	mu.Lock()
	defer mu.Unlock()
	var gaps []time.Duration
	for i := 1; i < 7; i++ {
		gaps = append(gaps, polls[i].Sub(polls[i-1]))
	}
	t.Logf("pauses between unavailable polls: %v", gaps)
	// Expected 20, 40, 80, 160, 320, 640 ms (the last capped at 1 s); a
	// loaded machine only makes pauses longer, so check the floor of the
	// last ones and that they grew.
	require.GreaterOrEqual(t, gaps[5], 600*time.Millisecond, "the sixth pause is 20ms * 2^5")
	require.GreaterOrEqual(t, gaps[4], 300*time.Millisecond, "the fifth pause is 20ms * 2^4")
	require.Less(t, gaps[0], gaps[5]/2, "the pauses grew")
}
