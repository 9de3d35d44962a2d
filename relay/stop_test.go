package relay

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/clocktest"
	"github.com/postingsvc/posting/outbox"
)

// returnsWithin runs f in a goroutine and reports whether it returned
// within d. It leaves f running when it did not.
func returnsWithin(f func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop waits for the loop: with a poll's send in flight, neither of two
// concurrent Stop calls returns until that send finished and its results
// were recorded (rows SENT, the poll observed); by then the loop has
// exited. Stop without Start, and Stop again, return at
// once; a stopped relay does not start again.
func TestStopWaitsForThePollInFlight(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)

		idle := b.relay(t, "idle", func(c *Config) { c.Now = time.Now })
		require.True(t, returnsWithin(idle.Stop, 10*time.Second), "Stop without Start")
		require.True(t, returnsWithin(idle.Stop, 10*time.Second), "Stop twice without Start")
		require.Error(t, idle.Start(context.Background()), "a stopped relay does not start")

		// Rows written a second ago, so they are due on the relay's real clock.
		b.clock = clocktest.New(time.Now().Add(-time.Second))
		rows := b.append(t, 1, 2, 3)
		release := b.send.Hold()
		var mu sync.Mutex
		var polls []Result
		var errs []error
		r := b.relay(t, "a", func(c *Config) {
			c.Now = time.Now
			c.Logger = slog.New(slog.DiscardHandler)
			c.BatchSize = 10 // not full: recorded at once, nothing deferred
			c.Observe = func(res Result, _ time.Duration, err error) {
				mu.Lock()
				defer mu.Unlock()
				polls = append(polls, res)
				if err != nil {
					errs = append(errs, err)
				}
			}
		})
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(func() {
			release()
			r.Stop()
		})
		require.Eventually(t, func() bool { return b.send.Calls() == 1 }, 10*time.Second, 5*time.Millisecond)

		stops := make(chan struct{}, 2)
		for range 2 {
			go func() { r.Stop(); stops <- struct{}{} }()
		}
		// Both calls are in Stop, and the send is still in flight.
		require.Eventually(t, r.Stopping, 10*time.Second, time.Millisecond)
		select {
		case <-stops:
			t.Fatal("Stop returned while a poll's send was in flight")
		case <-time.After(200 * time.Millisecond):
		}
		for _, m := range rows {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status, "the send has not finished")
		}

		release()
		for i := range 2 {
			select {
			case <-stops:
			case <-time.After(30 * time.Second):
				t.Fatalf("Stop call %d did not return after the send finished", i+1)
			}
		}
		// Stop returned: the poll was recorded and observed, the loop is gone.
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status, "recorded before Stop returned")
		}
		mu.Lock()
		require.Equal(t, []Result{{Claimed: 3, Sent: 3}}, polls, "the poll in flight, observed before Stop returned")
		require.Empty(t, errs)
		mu.Unlock()
		select {
		case <-r.Done():
		default:
			t.Fatal("Stop returned before the loop exited")
		}
		require.True(t, returnsWithin(r.Stop, 10*time.Second), "Stop after Stop")
		require.Error(t, r.Start(context.Background()), "a stopped relay does not start again")
		require.Equal(t, 1, b.send.Calls(), "no poll after Stop")
	})
}
