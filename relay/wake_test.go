package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// Commits wake the local relay (its interval here is an hour, so only a
// wake can make it poll); a storm of commits while it is busy sending is
// folded into a few polls, and neither the storm nor commits after Stop
// ever wait for the relay.
func TestCommitWakesAreCoalescedAndNeverBlockTheWriter(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		send := relaytest.NewSender()
		r, err := New(outbox.NewStore(db), send, Config{InstanceID: "a", Interval: time.Hour,
			OutageBackoffMax: time.Hour, StaleAfter: 3 * time.Hour})
		require.NoError(t, err)
		writers := database.WithCommitWaker(db.DB, r.Wake)
		appendPost := func(post int64) error {
			return database.Transaction(ctx, writers, func(tx *gorm.DB) error {
				_, err := outbox.Append(tx, eventtest.Outbox(t, event.PostingEvent, post, time.Now(), nil))
				return err
			})
		}
		sent := func() int64 { return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] }

		r.Wake() // before Start: kept, harmless
		require.NoError(t, r.Start(ctx))
		t.Cleanup(r.Stop)

		require.NoError(t, appendPost(1))
		require.Eventually(t, func() bool { return sent() == 1 }, 30*time.Second, 5*time.Millisecond, "a commit wakes the relay")

		// The relay is stuck in a send; 1,000 commits from 4 writers go on.
		release := send.Hold()
		require.NoError(t, appendPost(2))
		<-send.Entered()
		calls := send.Calls()
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 250 {
					errs <- appendPost(int64(100 + w*250 + i))
				}
			}()
		}
		stormed := make(chan struct{})
		go func() { wg.Wait(); close(stormed) }()
		select {
		case <-stormed:
		case <-time.After(time.Minute):
			release()
			t.Fatal("writers waited for the relay stuck in its send")
		}
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		release()
		require.Eventually(t, func() bool { return sent() == 1002 }, time.Minute, 10*time.Millisecond)
		// 1,000 rows are 10 full batches; wakes add a few polls, not one each.
		require.Less(t, send.Calls()-calls, 30, "wakes not coalesced")

		r.Stop()
		done := make(chan error, 1)
		go func() {
			r.Wake()
			done <- appendPost(3)
		}()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("a commit after Stop waited for the relay")
		}
	})
}
