package reservation_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
)

// A message's sequence is its outbox row id (event.CloudEventsSequence), so
// a post's row ids must follow the order its changes committed in, however
// many writers race: the change that committed last (the post's final
// state) has the highest id of the post's events. Writers serialize on the
// post's row, which they update before they append the event.
func TestOutboxIDFollowsThePostsCommitOrder(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		post := e.create(t, "raced")
		const writers, each = 4, 5
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					at := svcStart.Add(48*time.Hour + time.Duration(w*each+i+1)*time.Minute)
					for {
						_, err := e.svc.Update(ctx, post.ID, reservation.UpdateInput{ScheduledAt: &at})
						if err != nil && errors.Is(err, reservation.ErrConflict) {
							continue // another writer came first: try again
						}
						if err != nil {
							errs <- err
							return
						}
						break
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		var rows []outbox.Message
		require.NoError(t, e.db.DB.Where("aggregate_id = ?", post.ID).Order("id").Find(&rows).Error)
		require.Len(t, rows, 1+writers*each, "CREATED and every update")
		var f event.PostingEventFields
		require.NoError(t, json.Unmarshal([]byte(rows[0].Payload), &f))
		require.Equal(t, event.ActionCreated, f.Action, "the first event has the lowest id")
		require.NoError(t, json.Unmarshal([]byte(rows[len(rows)-1].Payload), &f))
		final := e.load(t, post.ID)
		require.True(t, final.ScheduledAt.Equal(f.ScheduledAt), "the last committed change (%s) is not the highest id (%s)",
			final.ScheduledAt, f.ScheduledAt)
	})
}
