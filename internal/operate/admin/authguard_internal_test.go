package admin

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// When the failure counter is full of sources still in their window, a new
// source takes the place of one that is not blocked: failing once from
// many other addresses must not free a blocked source to guess again.
func TestFailureCounterFullKeepsBlockedSources(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &failureCounter{limit: 5, window: time.Minute, now: func() time.Time { return now },
		maxSources: 4, sources: map[string]*failures{}}
	guess := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte(fmt.Sprint("guess-", i))) }
	for i := range 5 {
		c.add("192.0.2.9", guess(i))
	}
	blocked := func(source string) time.Duration { wait, _ := c.blocked(source); return wait }
	require.Positive(t, blocked("192.0.2.9"))
	for i := range 200 {
		c.add(fmt.Sprintf("10.0.%d.%d", i/256, i%256), guess(i))
		require.LessOrEqual(t, len(c.sources), c.maxSources, "the counter's memory is bounded")
	}
	require.Positive(t, blocked("192.0.2.9"), "the blocked source is still blocked")

	now = now.Add(time.Minute)
	require.Zero(t, blocked("192.0.2.9"), "until its window ends")
}
