package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/bench"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/relay/relaytest"
)

// Four relays draining one backlog together send every event once between
// them, leave every row SENT, and count what they sent.
func TestRelayInstancesDrainOneBacklogOnce(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		rows := relaytest.Seed(t, db.DB, 40, 5, time.Now().Add(-time.Second))
		fakes := []*relaytest.Sender{relaytest.NewSender(), relaytest.NewSender(), relaytest.NewSender(), relaytest.NewSender()}
		senders := make([]relay.Sender, len(fakes))
		for i, f := range fakes {
			senders[i] = f
		}
		res, err := bench.RelayInstances(context.Background(), db, senders)
		require.NoError(t, err)
		require.Equal(t, len(rows), res.Count)
		require.Positive(t, res.Elapsed)
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))
		sends := map[string]int{}
		for _, f := range fakes {
			for _, id := range f.SentEventIDs() {
				sends[id]++
			}
		}
		for _, m := range rows {
			require.Equal(t, 1, sends[m.EventID], "event %s", m.EventID)
		}
	})
}

func TestRelayInstancesNeedsASender(t *testing.T) {
	_, err := bench.RelayInstances(context.Background(), databasetest.NewSQLite(t), nil)
	require.ErrorContains(t, err, "no sender")
}
