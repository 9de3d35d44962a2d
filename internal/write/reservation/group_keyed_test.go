package reservation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// createOnceAll runs one CreateOnce per key at once, each as alice with the
// same input, and returns each one's answer and error, in the order of keys.
func createOnceAll(svc *reservation.Service, keys []string, at time.Time) ([]reservation.Created, []error) {
	out, errs := make([]reservation.Created, len(keys)), make([]error, len(keys))
	atOnce(len(keys), func(i int) {
		ctx := reservation.WithScope(context.Background(), reservation.Scope{OwnerID: "alice"})
		out[i], errs[i] = svc.CreateOnce(ctx, keys[i], reservation.CreateInput{Title: "keyed", Content: "c", ScheduledAt: at})
	})
	return out, errs
}

// Concurrent creates with idempotency keys share one transaction with their
// key rows (on PostgreSQL, fewer transaction ids than posts), and each key
// replays its post afterwards.
func TestGroupedKeyedCreatesCommitInOneTransaction(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc := groupedService(t, db)
		keys := make([]string, 12)
		for i := range keys {
			keys[i] = fmt.Sprint("key-", i)
		}
		at := time.Now().Add(time.Hour)
		first, errs := createOnceAll(svc, keys, at)
		var ids []int64
		for i := range keys {
			require.NoError(t, errs[i])
			require.False(t, first[i].Replayed)
			var events int64
			require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ?", first[i].Post.ID).Count(&events).Error)
			require.EqualValues(t, 1, events)
			ids = append(ids, first[i].Post.ID)
		}
		again, errs := createOnceAll(svc, keys, at)
		for i := range keys {
			require.NoError(t, errs[i])
			require.True(t, again[i].Replayed, keys[i])
			require.Equal(t, first[i].Post.ID, again[i].Post.ID, keys[i])
		}
		var n int64
		require.NoError(t, db.Model(&reservation.Post{}).Count(&n).Error)
		require.EqualValues(t, len(keys), n)
		if txs := postTransactions(t, db, ids); txs >= 0 {
			require.Less(t, txs, len(keys), "keyed creates shared transactions")
		}
	})
}

// Two requests with one key in one group create one post: the group's
// transaction fails on the key, each write is written again alone, and
// the later request replays the earlier's post; the group's other creates
// are written once each.
func TestGroupedCreatesWithOneKeyTwiceCreateOnePost(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc := groupedService(t, db)
		keys := []string{"twice", "a", "twice", "b", "c"}
		out, errs := createOnceAll(svc, keys, time.Now().Add(time.Hour))
		for i := range keys {
			require.NoError(t, errs[i], keys[i])
		}
		require.Equal(t, out[0].Post.ID, out[2].Post.ID, "one post for the key")
		require.NotEqual(t, out[0].Replayed, out[2].Replayed, "one of the two replays the other")
		var n int64
		require.NoError(t, db.Model(&reservation.Post{}).Count(&n).Error)
		require.EqualValues(t, 4, n)
		var events int64
		require.NoError(t, db.Model(&outbox.Message{}).Count(&events).Error)
		require.EqualValues(t, 4, events)
	})
}
