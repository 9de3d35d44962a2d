package relay

import (
	"testing"
	"time"

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
		r, loop := b.startOnWakes(t)
		require.Eventually(t, func() bool { return loop.now().polls >= 1 }, 10*time.Second, time.Millisecond, "the loop's first poll")

		rows := b.append(t, 7, 7, 7, 8)
		r.Wake() // one wake for all four commits
		require.Eventually(t, func() bool {
			for _, m := range rows {
				if b.row(t, m.ID).Status != outbox.StatusSent {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "every event sent without a second wake (the timer's poll is a minute away)")

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
