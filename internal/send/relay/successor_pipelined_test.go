package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A poll that sends a batch claimed by the poll before it (Pump's next
// batch, claimed beside a full batch's send) claims nothing itself
// (Result.Claimed 0), yet it sent rows: their posts' next events become
// heads only once those are SENT, and their commits' wakes were spent
// already. The loop must look again at once for them, as after any poll
// that sent rows, not leave them to the timer's poll.
//
// Two events of posts 1 and 2 fill the first batch (BatchSize 2); beside
// its send the next batch takes post 7's first event alone (its second
// waits behind it); the poll that sends that batch claims nothing.
func TestLoopFollowsAPollThatSentTheBatchClaimedBesideTheSendBefore(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second)) // rows due on the loop's real clock
		r, loop := b.startOnWakes(t, func(c *Config) { c.BatchSize = 2 })
		require.Eventually(t, func() bool { return loop.now().polls >= 1 }, 10*time.Second, time.Millisecond, "the loop's first poll")

		rows := b.append(t, 1, 2, 7, 7)
		r.Wake() // one wake for all four commits
		require.Eventually(t, func() bool {
			for _, m := range rows {
				if b.row(t, m.ID).Status != outbox.StatusSent {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "post 7's second event sent without a second wake (the timer's poll is a minute away)")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID}, b.send.SentIDs(), "each event sent once, in order")
		require.Empty(t, loop.now().errs)
	})
}
