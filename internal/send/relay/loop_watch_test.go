package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// observed gathers what a relay loop reports through Config.Observe.
type observed struct {
	mu     sync.Mutex
	counts loopCounts
}

// loopCounts is what a loop observed so far: its polls, the rows they
// claimed and deferred, and their errors.
type loopCounts struct {
	polls, claimed, deferred int
	errs                     []error
}

func (o *observed) observe(res Result, _ time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts.polls++
	o.counts.claimed += res.Claimed
	o.counts.deferred += res.Deferred
	if err != nil {
		o.counts.errs = append(o.counts.errs, err)
	}
}

func (o *observed) now() loopCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.counts
	c.errs = append([]error(nil), c.errs...)
	return c
}

// startOnWakes starts the loop of relay "a" on b, on the real clock, with
// its timer's poll a minute away: it polls at start, when woken, and right
// after a poll that sent rows. The relay stops at cleanup.
func (b *bundle) startOnWakes(t *testing.T, mutate ...func(*Config)) (*Relay, *observed) {
	t.Helper()
	o := &observed{}
	r := b.relay(t, "a", append([]func(*Config){func(c *Config) {
		c.Interval, c.StaleAfter, c.Now, c.Observe = time.Minute, 5*time.Minute, time.Now, o.observe
	}}, mutate...)...)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	return r, o
}

// startIdle is startOnWakes, returning once the loop's first poll, which
// finds nothing, was observed.
func (b *bundle) startIdle(t *testing.T, mutate ...func(*Config)) (*Relay, *observed) {
	t.Helper()
	r, o := b.startOnWakes(t, mutate...)
	require.Eventually(t, func() bool { return o.now().polls >= 1 }, 10*time.Second, time.Millisecond, "the loop's first poll")
	return r, o
}

// allSent reports whether every row of rows is SENT.
func (b *bundle) allSent(t *testing.T, rows ...outbox.Message) bool {
	t.Helper()
	for _, m := range rows {
		if b.row(t, m.ID).Status != outbox.StatusSent {
			return false
		}
	}
	return true
}
