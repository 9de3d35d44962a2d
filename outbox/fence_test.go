package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/outbox"
)

// A claims; its claim goes stale and is recovered; B claims the rows again,
// so they are PROCESSING once more, under a newer version. A's late result
// writes find the status they expect and only the version tells them apart
// from B's claim: each one (MarkSent, MarkFailed, Release, and the
// acknowledgement folded into MarkSentAndClaim) must be refused, counted as
// fenced, and leave B's claim as it was, which B can then complete.
func TestLateWritesOfARecoveredClaimAreFencedWhileReclaimed(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2, 3)
		now := t0.Add(time.Second)

		a, err := o.store.Claim(ctx, "a", 10, now)
		require.NoError(t, err)
		require.Equal(t, ids(rows), ids(a))
		rec, err := o.store.RecoverStale(ctx, now.Add(time.Millisecond), 3, now)
		require.NoError(t, err)
		require.Equal(t, outbox.Recovery{Retried: 3}, rec)
		b, err := o.store.Claim(ctx, "b", 10, now)
		require.NoError(t, err)
		require.Equal(t, ids(rows), ids(b))

		requireB := func(what string) {
			t.Helper()
			for i, m := range b {
				got := o.row(t, m.ID)
				require.Equal(t, outbox.StatusProcessing, got.Status, "%s: row %d", what, i)
				require.Equal(t, "b", *got.ClaimedBy, "%s: row %d", what, i)
				require.Equal(t, m.Version, got.Version, "%s: row %d", what, i)
				require.Equal(t, 1, got.RetryCount, "%s: row %d: only the recovery counted", what, i)
				require.Nil(t, got.SentAt, "%s: row %d", what, i)
				require.NotEqual(t, a[i].Version, got.Version)
			}
		}
		requireB("after B's claim")

		fenced, err := o.store.MarkSent(ctx, a, now.Add(time.Second))
		require.NoError(t, err)
		require.Equal(t, 3, fenced, "A's late MarkSent")
		requireB("after A's late MarkSent")

		fenced, err = o.store.MarkFailed(ctx, []outbox.Failure{
			{Message: a[0], Err: "late rejection", NextAttemptAt: now.Add(time.Hour)},
			{Message: a[1], Err: "late final rejection", Final: true},
		})
		require.NoError(t, err)
		require.Equal(t, 2, fenced, "A's late MarkFailed")
		requireB("after A's late MarkFailed")

		fenced, err = o.store.Release(ctx, a)
		require.NoError(t, err)
		require.Equal(t, 3, fenced, "A's late Release")
		requireB("after A's late Release")

		// A's acknowledgements deferred into its next claim: fenced too, and
		// nothing is claimed, since B holds every head.
		claimed, fenced, err := o.store.MarkSentAndClaim(ctx, a, now.Add(time.Second), "a", 10, now)
		require.NoError(t, err)
		require.Equal(t, 3, fenced, "A's late MarkSentAndClaim")
		require.Empty(t, claimed)
		requireB("after A's late MarkSentAndClaim")

		// B's own writes still go through.
		fenced, err = o.store.MarkSent(ctx, b[:2], now.Add(2*time.Second))
		require.NoError(t, err)
		require.Zero(t, fenced)
		fenced, err = o.store.Release(ctx, b[2:])
		require.NoError(t, err)
		require.Zero(t, fenced)
		for _, m := range b[:2] {
			got := o.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Equal(t, 1, got.RetryCount)
		}
		last := o.row(t, b[2].ID)
		require.Equal(t, outbox.StatusRetry, last.Status, "released, with its one recovery counted")
		require.Equal(t, 1, last.RetryCount)
	})
}
