package reservation

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A keyed create whose key row another transaction holds, not committed
// yet (a peer's group, a keyed create or batch alone, a stalled session),
// waits for it in its group's transaction: the unique index gives no way
// to pass over it, as FOR UPDATE SKIP LOCKED passes over a held post. The
// create of another owner in the same group waits with it, and is written
// once the holder ends. This documents that wait; no one but a transaction
// of the service holds a key row, for the time of its commit.
func TestGroupedKeyedCreateOfAHeldKeyHoldsUpItsGroup(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		if db.Dialect == database.SQLite {
			t.Skip("SQLite has one writer at a time: no key row is held by another")
		}
		t.Parallel()
		svc, err := NewService(db.DB, ServiceConfig{GroupCommitters: 1})
		require.NoError(t, err)
		alice := WithScope(context.Background(), Scope{OwnerID: "alice"})
		bob := WithScope(context.Background(), Scope{OwnerID: "bob"})
		at := svc.now().Add(time.Hour)

		holder := db.DB.Begin()
		require.NoError(t, holder.Error)
		released := false
		defer func() {
			if !released {
				holder.Rollback()
			}
		}()
		require.NoError(t, holder.Create(&idempotencyRecord{OwnerID: "alice", Key: "held", RequestHash: "h",
			PostID: 1, Response: "{}", CreatedAt: svc.now()}).Error)

		var keyed Created
		answers := startQueued(t, svc,
			func() (err error) {
				keyed, err = svc.CreateOnce(alice, "held", CreateInput{Title: "keyed", Content: "c", ScheduledAt: at})
				return err
			},
			func() error {
				_, err := svc.Create(bob, CreateInput{Title: "bob's", Content: "c", ScheduledAt: at})
				return err
			})
		require.Eventually(t, func() bool { return keyWaiters(t, db) > 0 }, 10*time.Second, time.Millisecond,
			"the group's transaction waits for the held key")
		select {
		case err := <-answers[1]:
			t.Fatalf("bob's create was answered (%v) while its group waited for alice's key", err)
		default:
		}
		require.NoError(t, holder.Rollback().Error)
		released = true
		require.NoError(t, <-answers[0])
		require.NoError(t, <-answers[1])
		require.False(t, keyed.Replayed)
	})
}

// keyWaiters is how many sessions of db's database wait for a lock, on
// MySQL running an INSERT (of the test's key row).
func keyWaiters(t *testing.T, db *database.DB) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
	if db.Dialect == database.MySQL {
		q = `SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() AND command = 'Query' AND info LIKE 'INSERT%idempotency_keys%'`
	}
	require.NoError(t, db.Raw(q).Scan(&n).Error)
	return n
}
