package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// An event of a post becomes claimable once the one before it is SENT.
// When several events of one post are committed before the relay wakes
// (their wakes coalesce into one), the woken poll sends the first, and the
// loop polls again at once for the next, in order, instead of leaving each
// for a poll of the timer an Interval later.
func TestLoopSendsAPostsNextEventsWithoutWaitingForTheTimer(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second)) // rows due on the loop's real clock
		r, loop := b.startIdle(t)

		rows := b.append(t, 7, 7, 7, 8)
		r.Wake() // one wake for all four commits
		require.Eventually(t, func() bool { return b.allSent(t, rows...) }, 10*time.Second, 5*time.Millisecond, "every event sent without a second wake (the timer's poll is a minute away)")

		sent := b.send.SentIDs()
		require.Len(t, sent, 4, "each event sent once")
		var post7 []int64
		for _, id := range sent {
			if id != rows[3].ID {
				post7 = append(post7, id)
			}
		}
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, post7, "post 7's events in the order of their commits")
		require.Empty(t, loop.now().errs)
	})
}

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
		r, loop := b.startIdle(t, func(c *Config) { c.BatchSize = 2 })

		rows := b.append(t, 1, 2, 7, 7)
		r.Wake() // one wake for all four commits
		require.Eventually(t, func() bool { return b.allSent(t, rows...) }, 10*time.Second, 5*time.Millisecond, "post 7's second event sent without a second wake (the timer's poll is a minute away)")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID}, b.send.SentIDs(), "each event sent once, in order")
		require.Empty(t, loop.now().errs)
	})
}

// The batch claimed beside a full batch's send (Pump's next batch) is
// claimed while that full batch is still PROCESSING, so it cannot hold the
// next events of the full batch's posts. When the broker rejects every row
// of that next batch, the poll that sends it acknowledged nothing, yet the
// full batch's acknowledgements are still to be written (deferred, or
// written just before by MarkSent) and their posts' next events are due:
// the loop must claim them at once, not leave them to the timer's poll.
//
// Posts 1 and 2 fill the first batch (BatchSize 2); beside its send the
// next batch takes post 3's event alone (post 1's second waits behind its
// first); the broker rejects post 3's event; post 1's second event must
// still leave without a wake (the timer's poll is a minute away).
func TestLoopClaimsTheSuccessorsOfAFullBatchWhenTheNextBatchIsRejected(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second)) // rows due on the loop's real clock
		b.send.Answer("3", errRejected)
		r, loop := b.startIdle(t, func(c *Config) { c.BatchSize = 2 })

		rows := b.append(t, 1, 2, 3, 1)
		r.Wake() // one wake for all four commits
		sent := assert.Eventually(t, func() bool {
			return b.row(t, rows[3].ID).Status == outbox.StatusSent
		}, 10*time.Second, 5*time.Millisecond, "post 1's second event sent without a second wake (the timer's poll is a minute away)")
		require.True(t, sent, "observed %+v, sent %v, statuses %s %s %s %s", loop.now(), b.send.SentIDs(),
			b.row(t, rows[0].ID).Status, b.row(t, rows[1].ID).Status, b.row(t, rows[2].ID).Status, b.row(t, rows[3].ID).Status)
		for _, m := range []outbox.Message{rows[0], rows[1], rows[3]} {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status, "row %d", m.ID)
		}
		require.Equal(t, outbox.StatusRetry, b.row(t, rows[2].ID).Status, "post 3's rejected event")
	})
}
