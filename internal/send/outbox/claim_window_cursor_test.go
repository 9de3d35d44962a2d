package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// sameCreated inserts n PENDING rows of distinct aggregates, all with one
// created, due an hour ago, and returns their ids in order.
func sameCreated(t *testing.T, db *database.DB, n int) []int64 {
	t.Helper()
	require.NoError(t, db.Exec(fmt.Sprintf(`INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, next_attempt_at)
		SELECT 'e-' || g, 'POSTING_RESERVATION_EVENT', 1000 + g, jsonb_build_object('postId', 1000 + g),
			TIMESTAMPTZ '2026-12-01 12:00:00+00', 'PENDING', TIMESTAMPTZ '2026-12-01 12:00:00+00'
		FROM generate_series(1, %d) g`, n)).Error)
	var out []int64
	require.NoError(t, db.Model(&outbox.Message{}).Order("id").Pluck("id", &out).Error)
	return out
}

// claimWhileLocked claims with store while another transaction holds
// locked (as another claimer's statement in flight does).
func claimWhileLocked(t *testing.T, db *database.DB, store *outbox.Store, locked []int64, limit int, now time.Time) []outbox.Message {
	t.Helper()
	var claimed []outbox.Message
	require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
		if len(locked) > 0 {
			var got []int64
			require.NoError(t, tx.Raw("SELECT id FROM outbox WHERE id IN ? FOR UPDATE", locked).Scan(&got).Error)
			require.Len(t, got, len(locked))
		}
		var err error
		claimed, err = store.Claim(context.Background(), "me", limit, now)
		require.NoError(t, err)
		return nil
	}))
	return claimed
}

// The window cursor on PostgreSQL, over rows that all share one created:
// a first window held whole by another claimer is followed by the next
// one; a window smaller than need, or exactly need with nothing after,
// ends the claim; a window whose rows are all held returns no row and no
// error (the claimed side of the statement's join is NULL); an empty
// outbox returns nothing.
func TestClaimWindowCursorOverEqualCreated(t *testing.T) {
	t.Parallel()
	for _, now := range []time.Time{{}, t0.Add(time.Hour)} {
		t.Run(fmt.Sprintf("now=%v", now.IsZero()), func(t *testing.T) {
			db := databasetest.New(t, database.PostgreSQL)
			store := outbox.NewStore(db)
			require.True(t, store.ClaimsInOneStatement())

			// Empty outbox.
			require.Empty(t, claimWhileLocked(t, db, store, nil, 3, now))

			id := sameCreated(t, db, 9)
			// First window (1..3) held: the second (4..6) is claimed.
			require.Equal(t, id[3:6], ids(claimWhileLocked(t, db, store, id[0:3], 3, now)))
			// Heads now 1,2,3,7,8,9. Two held, need 5: the window 1,2,3,7,8
			// is read whole (size == need), 3,7,8 claimed; the next window
			// (9) then completes... up to need.
			got := ids(claimWhileLocked(t, db, store, id[0:2], 5, now))
			require.Equal(t, []int64{id[2], id[6], id[7], id[8]}, got)
			// Heads 1,2 only, both held, need 2: window exactly need, none
			// claimed, the next window empty.
			require.Empty(t, claimWhileLocked(t, db, store, id[0:2], 2, now))
			// Heads 1,2 only, both held, need 5: window smaller than need.
			require.Empty(t, claimWhileLocked(t, db, store, id[0:2], 5, now))
			require.Equal(t, id[0:2], ids(claimWhileLocked(t, db, store, nil, 5, now)))
			for _, i := range id {
				m := databasetest.Load[outbox.Message](t, db.DB, i)
				require.Equal(t, outbox.StatusProcessing, m.Status)
				require.Equal(t, int64(2), m.Version, "row %d claimed once (version 1 at insert)", i)
			}
		})
	}
}

// A RETRY row not yet due by the database's clock is not claimed, in the
// first window or a later one; a due one is, and a PENDING successor of a
// RETRY row waits for it.
func TestClaimWindowLeavesRetryRowsNotYetDue(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.PostgreSQL)
	store := outbox.NewStore(db)
	id := sameCreated(t, db, 6)
	require.NoError(t, db.Exec("UPDATE outbox SET status = 'RETRY', retry_count = 1, next_attempt_at = now() + interval '1 hour' WHERE id IN ?", []int64{id[1], id[4]}).Error)
	require.NoError(t, db.Exec("UPDATE outbox SET status = 'RETRY', retry_count = 1, next_attempt_at = now() - interval '1 second' WHERE id = ?", id[5]).Error)
	// A successor of the not-yet-due RETRY row id[1].
	require.NoError(t, db.Exec(`INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, next_attempt_at)
		SELECT 'succ', event_type, aggregate_id, payload, created, 'PENDING', next_attempt_at FROM outbox WHERE id = ?`, id[1]).Error)
	got := ids(claimWhileLocked(t, db, store, id[0:1], 2, time.Time{}))
	require.Equal(t, []int64{id[2], id[3]}, got)
	got = ids(claimWhileLocked(t, db, store, nil, 10, time.Time{}))
	require.Equal(t, []int64{id[0], id[5]}, got)
}

// The claim's claimed_at is the database's clock while the claim is taken,
// one stamp for every window of the claim.
func TestClaimStampIsTheDatabaseClockOncePerClaim(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.PostgreSQL)
	store := outbox.NewStore(db)
	id := sameCreated(t, db, 6)
	var before, after time.Time
	require.NoError(t, db.Raw("SELECT clock_timestamp()").Scan(&before).Error)
	claimed := claimWhileLocked(t, db, store, id[0:2], 2, time.Time{})
	require.NoError(t, db.Raw("SELECT clock_timestamp()").Scan(&after).Error)
	require.Equal(t, id[2:4], ids(claimed))
	var stamps []time.Time
	for _, m := range claimed {
		require.NotNil(t, m.ClaimedAt)
		got := databasetest.Load[outbox.Message](t, db.DB, m.ID)
		require.True(t, got.ClaimedAt.Equal(*m.ClaimedAt), "returned stamp %v, stored %v", *m.ClaimedAt, *got.ClaimedAt)
		stamps = append(stamps, *got.ClaimedAt)
	}
	require.True(t, stamps[0].Equal(stamps[1]), "one stamp per claim: %v", stamps)
	require.False(t, stamps[0].Before(database.Normalize(before)), "stamp %v before the claim began %v", stamps[0], before)
	require.False(t, stamps[0].After(after), "stamp %v after the claim ended %v", stamps[0], after)
}
