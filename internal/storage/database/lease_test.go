package database_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A lease is taken by one holder, renewed by it (later expiry, new info),
// refused to another while it runs, and read as held with its holder and
// info; a release by another holder changes nothing, the holder's own
// frees it at once.
func TestLeaseTakeRenewRefuseRelease(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		_, held, err := database.ReadLease(ctx, db.DB, "role")
		require.NoError(t, err)
		require.False(t, held, "a lease never taken is not held")

		first, ok, err := database.AcquireLease(ctx, db.DB, "role", "a", "127.0.0.1:1", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "a free lease is taken")
		require.Equal(t, "a", first.Holder)
		require.Equal(t, "127.0.0.1:1", first.Info)
		now, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		require.WithinDuration(t, now.Add(time.Minute), first.ExpiresAt, 5*time.Second, "ttl by the database clock")

		// A longer ttl: SQLite's clock reads milliseconds, so a renewal in
		// the same millisecond with the same ttl would not move the expiry.
		renewed, ok, err := database.AcquireLease(ctx, db.DB, "role", "a", "127.0.0.1:2", 2*time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "the holder renews")
		require.True(t, renewed.ExpiresAt.After(first.ExpiresAt), "renewed until %s, was %s", renewed.ExpiresAt, first.ExpiresAt)
		require.Equal(t, "127.0.0.1:2", renewed.Info)

		other, ok, err := database.AcquireLease(ctx, db.DB, "role", "b", "127.0.0.1:3", time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "refused while another holds it")
		require.Equal(t, "a", other.Holder, "the refusal names the holder")
		require.Equal(t, "127.0.0.1:2", other.Info, "and what it told the others")
		read, held, err := database.ReadLease(ctx, db.DB, "role")
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, "a", read.Holder)
		require.Equal(t, renewed.ExpiresAt, read.ExpiresAt, "the refused take changed nothing")

		// Leases of other names are their own.
		_, ok, err = database.AcquireLease(ctx, db.DB, "other-role", "b", "", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)

		require.NoError(t, database.ReleaseLease(ctx, db.DB, "role", "b"))
		_, held, err = database.ReadLease(ctx, db.DB, "role")
		require.NoError(t, err)
		require.True(t, held, "only the holder releases")

		require.NoError(t, database.ReleaseLease(ctx, db.DB, "role", "a"))
		_, held, err = database.ReadLease(ctx, db.DB, "role")
		require.NoError(t, err)
		require.False(t, held, "released")
		taken, ok, err := database.AcquireLease(ctx, db.DB, "role", "b", "127.0.0.1:3", time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "a released lease is taken at once")
		require.Equal(t, "b", taken.Holder)
	})
}

// A lease its holder stops renewing is refused to others until it
// expires by the database clock, then taken over; the old holder can no
// longer renew it.
func TestLeaseTakenOverAfterExpiry(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		const ttl = 1500 * time.Millisecond
		a, ok, err := database.AcquireLease(ctx, db.DB, "role", "a", "127.0.0.1:1", ttl)
		require.NoError(t, err)
		require.True(t, ok)

		_, ok, err = database.AcquireLease(ctx, db.DB, "role", "b", "127.0.0.1:2", time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "refused before the expiry")

		var b database.Lease
		require.Eventually(t, func() bool {
			l, ok, err := database.AcquireLease(ctx, db.DB, "role", "b", "127.0.0.1:2", time.Minute)
			require.NoError(t, err)
			b = l
			return ok
		}, 20*time.Second, 50*time.Millisecond, "taken over after the expiry")
		now, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		require.False(t, now.Before(a.ExpiresAt), "taken at %s, before the expiry %s", now, a.ExpiresAt)
		require.Equal(t, "b", b.Holder)
		require.Equal(t, "127.0.0.1:2", b.Info)

		l, ok, err := database.AcquireLease(ctx, db.DB, "role", "a", "127.0.0.1:1", ttl)
		require.NoError(t, err)
		require.False(t, ok, "the old holder lost it")
		require.Equal(t, "b", l.Holder)
	})
}

// Holders racing for a free lease end with one of them holding it, and
// every one told which.
func TestLeaseRaceHasOneWinner(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		const n = 6
		type result struct {
			holder, seen string
			ok           bool
			err          error
		}
		results := make(chan result, n)
		for i := range n {
			go func() {
				holder := fmt.Sprintf("h%d", i)
				l, ok, err := database.AcquireLease(ctx, db.DB, "role", holder, holder, time.Minute)
				results <- result{holder, l.Holder, ok, err}
			}()
		}
		var winners []string
		seen := map[string]bool{}
		for range n {
			r := <-results
			require.NoError(t, r.err, r.holder)
			if r.ok {
				winners = append(winners, r.holder)
			}
			seen[r.seen] = true
		}
		require.Len(t, winners, 1, "one holder")
		require.Equal(t, map[string]bool{winners[0]: true}, seen, "every one was told the same holder")
	})
}
