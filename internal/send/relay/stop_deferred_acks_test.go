package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// The loop's ctx ending between a poll that left its acknowledgements to
// the poll that follows and that poll: the follow-up's claim fails (or it
// is never made), and the loop's last flush writes them, counted once as
// sent, never as fenced.
func TestLoopCancelledBeforeTheFollowUpWritesDeferredAcknowledgementsOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks() // SQLite too
		b.clock.Set(time.Now().Add(-time.Second))
		rows := b.append(t, 1, 2, 3)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			mu    sync.Mutex
			polls []Result
		)
		r := b.relay(t, "a", func(c *Config) {
			c.Interval, c.StaleAfter, c.Now = time.Minute, 5*time.Minute, time.Now
			c.BatchSize = 10 // not full: deferred only because the loop follows
			c.Observe = func(res Result, _ time.Duration, _ error) {
				mu.Lock()
				defer mu.Unlock()
				polls = append(polls, res)
				if res.Deferred > 0 {
					cancel()
				}
			}
		})
		require.NoError(t, r.Start(ctx))
		t.Cleanup(r.Stop)
		requireWithin(t, r.Done(), 30*time.Second, "the loop did not exit when its ctx ended")
		b.requireStatus(t, rows, outbox.StatusSent, "written by the loop's last flush")
		mu.Lock()
		defer mu.Unlock()
		t.Logf("observed: %+v", polls)
		sent, deferred, fenced := 0, 0, 0
		for _, p := range polls {
			sent, deferred, fenced = sent+p.Sent, deferred+p.Deferred, fenced+p.Fenced
		}
		require.Equal(t, 3, deferred, "deferred by the first poll")
		require.Equal(t, 3, sent, "counted once as sent")
		require.Zero(t, fenced)
		require.Len(t, b.send.SentIDs(), 3, "each sent once")
	})
}
