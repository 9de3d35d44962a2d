package relay

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
)

// A send that ended without an answer keeps its row PROCESSING, holding the
// post's next event, until the sender says the request can no longer land;
// then the row goes back (no attempt spent) and is sent, before the post's
// next event. A plain unavailable answer (nothing written) releases at once.
func TestUnansweredSendHoldsItsRowUntilSettled(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 1, 2)
		settled := make(chan struct{})
		b.send.Answer(strconv.FormatInt(1, 10), &UnansweredError{Err: unreachable, Settled: settled})
		b.send.Answer(strconv.FormatInt(2, 10), unreachable)
		r := b.relay(t, "a")
		other := b.relay(t, "b")

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Held)
		require.Equal(t, 1, res.Released)
		require.Equal(t, outbox.StatusProcessing, b.row(t, rows[0].ID).Status, "released while its request may land")
		require.Equal(t, outbox.StatusPending, b.row(t, rows[2].ID).Status, "nothing written: released at once")

		// Meanwhile no relay sends the post's events; the other post's go.
		res, err = other.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Sent)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed+res.Released)
		require.Equal(t, outbox.StatusProcessing, b.row(t, rows[0].ID).Status)

		close(settled)
		for range 3 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
			b.clock.Add(time.Millisecond)
		}
		_, err = r.Flush(ctx)
		require.NoError(t, err)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Zero(t, got.RetryCount, "no answer spent an attempt")
		}
		require.Equal(t, []int64{rows[2].ID, rows[0].ID, rows[1].ID},
			b.send.SentIDs(), "acknowledged: the held row, sent again, before the post's next event")
	})
}
