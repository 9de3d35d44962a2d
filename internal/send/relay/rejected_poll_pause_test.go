package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A broker that rejects every event (not unreachable) does not make the
// loop spin: a rejected row frees no next event of its post, so the poll
// that claimed and rejected them is not followed at once, and the loop
// pauses for its Interval; each row spent the one attempt of that send.
func TestLoopPausesAfterAPollWhoseRowsWereAllRejected(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second))
		b.send.Reject(func(event.Message) error { return errRejected })
		rows := b.append(t, 1, 2, 7, 7)
		_, loop := b.startOnWakes(t)
		require.Eventually(t, func() bool { return loop.now().polls >= 1 }, 10*time.Second, time.Millisecond, "the loop's first poll")
		time.Sleep(300 * time.Millisecond) // a poll that followed at once would have come by now
		require.Equal(t, 1, loop.now().polls, "polls while every head was rejected and none due again")
		require.Equal(t, 1, b.send.Calls(), "sends")
		for _, m := range rows[:3] {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusRetry, got.Status, "row %d", m.ID)
			require.Equal(t, 1, got.RetryCount, "row %d", m.ID)
		}
		require.Equal(t, outbox.StatusPending, b.row(t, rows[3].ID).Status, "post 7's second event waits behind its rejected first")
	})
}
