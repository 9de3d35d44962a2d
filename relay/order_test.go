package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// Four relays running their pipelined loops on one backlog, with the broker
// rejecting the first attempt of every third event (RETRY, due again after
// a short backoff) and wakes arriving all the while, send every event once
// and keep per-post order: no later event of a post overtakes one waiting
// to be retried, whichever relay claimed it and whichever batch (the one
// in the air or the one claimed beside it) held it.
func TestPipelinedRelaysKeepPerPostOrderAcrossRejections(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		rows := b.appendRounds(t, 40, 5)
		b.send.SetPause(time.Millisecond)
		attempts := map[int64]int{} // read and written under the sender's lock
		b.send.Reject(func(m outbox.Message) error {
			attempts[m.ID]++
			if m.ID%3 == 0 && attempts[m.ID] == 1 {
				return errRejected
			}
			return nil
		})
		var relays []*Relay
		for i := range 4 {
			r, err := New(outbox.NewStore(db), b.send, Config{InstanceID: "r" + string(rune('a'+i)),
				Interval: 20 * time.Millisecond, BatchSize: 7, StaleAfter: time.Minute,
				RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
			require.NoError(t, err)
			relays = append(relays, r)
		}
		for _, r := range relays {
			require.NoError(t, r.Start(context.Background()))
			t.Cleanup(r.Stop)
		}
		require.Eventually(t, func() bool {
			for _, r := range relays {
				r.Wake()
			}
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, 2*time.Minute, 10*time.Millisecond)
		for _, r := range relays {
			r.Stop()
		}
		requireOrderedOnce(t, rows, b.send.SentIDs())
		for _, m := range rows {
			want := 0
			if m.ID%3 == 0 {
				want = 1
			}
			require.Equal(t, want, b.row(t, m.ID).RetryCount, "row %d", m.ID)
		}
	})
}
