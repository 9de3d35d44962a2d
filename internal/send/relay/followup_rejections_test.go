package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A broker that rejects every event (not unreachable) does not make the
// loop spin: the poll that claimed and rejected them is followed by one
// that finds them not due yet (RetryBase), and the loop pauses for its
// Interval; no attempt is spent but the one of each poll that sent.
func TestLoopFollowingRejectionsDoesNotSpin(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second))
		b.send.Reject(func(event.Message) error { return errRejected })
		var (
			mu    sync.Mutex
			polls []Result
		)
		r := b.relay(t, "a", func(c *Config) {
			c.Interval, c.StaleAfter, c.Now = time.Minute, 5*time.Minute, time.Now
			c.Observe = func(res Result, _ time.Duration, _ error) {
				mu.Lock()
				defer mu.Unlock()
				polls = append(polls, res)
			}
		})
		rows := b.append(t, 1, 2, 7, 7)
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		t.Logf("observed: %+v", polls)
		require.LessOrEqual(t, len(polls), 2, "polls while every head was rejected and none due again")
		require.Equal(t, 1, b.send.Calls(), "sends")
		for _, m := range rows[:3] {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusRetry, got.Status, "row %d", m.ID)
			require.Equal(t, 1, got.RetryCount, "row %d", m.ID)
		}
		require.Equal(t, outbox.StatusPending, b.row(t, rows[3].ID).Status, "post 7's second event waits behind its rejected first")
	})
}
