package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

func TestAppendWritesEnvelope(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		m := o.append(t, t0, 42)[0]
		got := o.row(t, m.ID)
		require.Equal(t, outbox.StatusPending, got.Status)
		require.Equal(t, int64(42), got.AggregateID)
		require.Equal(t, "42", got.Key())
		require.True(t, got.Created.Equal(t0), "created %v", got.Created)
		var payload map[string]any
		require.NoError(t, json.Unmarshal([]byte(got.Payload), &payload))
		require.Equal(t, got.EventID, payload["eventId"])
		require.Equal(t, "POSTING_EVENT", payload["eventType"])
		require.EqualValues(t, 42, payload["postId"])
		require.Equal(t, "2026-12-01T12:00:00Z", payload["occurredAt"])
		require.Equal(t, "CREATED", payload["action"])

		// A dedup key admits one row only.
		first := reservationtest.Outbox(t, event.ReservationEvent, 42, t0, nil)
		first.DedupKey = "reservation:42"
		_, err := outbox.Append(o.db.DB, first)
		require.NoError(t, err)
		second := reservationtest.Outbox(t, event.ReservationEvent, 42, t0, nil)
		second.DedupKey = first.DedupKey
		_, err = outbox.Append(o.db.DB, second)
		require.ErrorIs(t, err, outbox.ErrDuplicate)
	})
}

func TestClaimOrderAndPerAggregateHead(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		// Aggregate 1 has three events, 2 two, 3 one.
		rows := o.append(t, t0, 1, 2, 1, 3, 2, 1)

		first, err := o.store.Claim(ctx, "a", 10, t0.Add(time.Second))
		require.NoError(t, err)
		// Only the head of each aggregate is claimable.
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[3].ID}, ids(first))
		for _, m := range first {
			got := o.row(t, m.ID)
			require.Equal(t, outbox.StatusProcessing, got.Status)
			require.Equal(t, "a", *got.ClaimedBy)
			require.Equal(t, m.Version, got.Version)
		}
		// While the heads are PROCESSING, another claimer gets nothing.
		second, err := o.store.Claim(ctx, "b", 10, t0.Add(time.Second))
		require.NoError(t, err)
		require.Empty(t, second)

		fenced, err := o.store.MarkSent(ctx, first, t0.Add(2*time.Second))
		require.NoError(t, err)
		require.Zero(t, fenced)
		require.Equal(t, outbox.StatusSent, o.row(t, rows[0].ID).Status)

		// Now the second events of aggregates 1 and 2 are heads.
		third, err := o.store.Claim(ctx, "b", 10, t0.Add(3*time.Second))
		require.NoError(t, err)
		require.Equal(t, []int64{rows[2].ID, rows[4].ID}, ids(third))

		// Limit is honoured.
		_, err = o.store.MarkSent(ctx, third, t0)
		require.NoError(t, err)
		one, err := o.store.Claim(ctx, "c", 1, t0.Add(4*time.Second))
		require.NoError(t, err)
		require.Equal(t, []int64{rows[5].ID}, ids(one))
	})
}

func TestFailedHeadHoldsItsAggregate(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 7, 7, 8)
		claimed, err := o.store.Claim(ctx, "a", 10, t0.Add(time.Second))
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID, rows[2].ID}, ids(claimed))

		retryAt := t0.Add(time.Minute)
		fenced, err := o.store.MarkFailed(ctx, []outbox.Failure{{Message: claimed[0], Err: "rejected: INVALID_RECORD", NextAttemptAt: retryAt}})
		require.NoError(t, err)
		require.Zero(t, fenced)
		got := o.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusRetry, got.Status)
		require.Equal(t, 1, got.RetryCount)
		require.Equal(t, "rejected: INVALID_RECORD", *got.LastError)
		require.True(t, got.NextAttemptAt.Equal(retryAt))

		// Not due yet, and its successor waits behind it.
		none, err := o.store.Claim(ctx, "a", 10, t0.Add(2*time.Second))
		require.NoError(t, err)
		require.Empty(t, none)

		// Due again: the failed head comes back, alone.
		again, err := o.store.Claim(ctx, "a", 10, retryAt)
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID}, ids(again))

		// FAIL holds the successor too.
		_, err = o.store.MarkFailed(ctx, []outbox.Failure{{Message: again[0], Err: "rejected", Final: true}})
		require.NoError(t, err)
		require.Equal(t, outbox.StatusFail, o.row(t, rows[0].ID).Status)
		held, err := o.store.Claim(ctx, "a", 10, retryAt.Add(time.Hour))
		require.NoError(t, err)
		require.Empty(t, held)
	})
}

func TestReleaseKeepsRetries(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2)
		now := t0.Add(time.Second)
		claimed, err := o.store.Claim(ctx, "a", 10, now)
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		_, err = o.store.MarkFailed(ctx, []outbox.Failure{{Message: claimed[1], Err: "x", NextAttemptAt: now}})
		require.NoError(t, err)
		reclaimed, err := o.store.Claim(ctx, "a", 10, now)
		require.NoError(t, err)
		require.Equal(t, []int64{rows[1].ID}, ids(reclaimed))

		fenced, err := o.store.Release(ctx, append([]outbox.Message{claimed[0]}, reclaimed...))
		require.NoError(t, err)
		require.Zero(t, fenced)
		a, b := o.row(t, rows[0].ID), o.row(t, rows[1].ID)
		require.Equal(t, outbox.StatusPending, a.Status)
		require.Zero(t, a.RetryCount)
		require.Equal(t, outbox.StatusRetry, b.Status)
		require.Equal(t, 1, b.RetryCount)
	})
}

func TestRecoverStaleFencesTheOldClaim(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2)
		dead, err := o.store.Claim(ctx, "dead", 10, t0.Add(time.Millisecond))
		require.NoError(t, err)
		require.Len(t, dead, 2)
		// Row 2 has used all its retries already.
		require.NoError(t, o.db.DB.Model(&outbox.Message{}).Where("id = ?", rows[1].ID).Update("retry_count", 3).Error)

		// Not stale yet.
		rec, err := o.store.RecoverStale(ctx, t0, 3, t0)
		require.NoError(t, err)
		require.Equal(t, outbox.Recovery{}, rec)

		rec, err = o.store.RecoverStale(ctx, t0.Add(time.Second), 3, t0.Add(time.Second))
		require.NoError(t, err)
		require.Equal(t, outbox.Recovery{Retried: 1, Failed: 1}, rec)
		a, b := o.row(t, rows[0].ID), o.row(t, rows[1].ID)
		require.Equal(t, outbox.StatusRetry, a.Status)
		require.Equal(t, 1, a.RetryCount)
		require.Equal(t, outbox.StatusFail, b.Status)
		require.Equal(t, 4, b.RetryCount)
		require.Contains(t, *b.LastError, "claim expired")

		// The dead claim's late writes are refused.
		fenced, err := o.store.MarkSent(ctx, dead, t0.Add(2*time.Second))
		require.NoError(t, err)
		require.Equal(t, 2, fenced)
		fenced, err = o.store.MarkFailed(ctx, []outbox.Failure{{Message: dead[0], Err: "late"}})
		require.NoError(t, err)
		require.Equal(t, 1, fenced)
		require.Equal(t, outbox.StatusRetry, o.row(t, rows[0].ID).Status)

		// Another instance claims and sends the recovered row.
		live, err := o.store.Claim(ctx, "live", 10, t0.Add(time.Second))
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID}, ids(live))
		fenced, err = o.store.MarkSent(ctx, live, t0.Add(3*time.Second))
		require.NoError(t, err)
		require.Zero(t, fenced)
		require.Equal(t, outbox.StatusSent, o.row(t, rows[0].ID).Status)
	})
}

// MarkSentAndClaim writes the acknowledgements first, so the events they
// held are claimed in the same transaction; stale claims are fenced.
func TestMarkSentAndClaim(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2, 1, 2, 3)
		now := t0.Add(time.Second)
		first, err := o.store.Claim(ctx, "a", 2, now)
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, ids(first))

		// Aggregate 2's head was recovered by another instance meanwhile.
		rec, err := o.store.RecoverStale(ctx, now.Add(time.Millisecond), 3, now)
		require.NoError(t, err)
		require.Equal(t, 2, rec.Retried)
		again, err := o.store.Claim(ctx, "b", 10, now)
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[4].ID}, ids(again))
		_, err = o.store.MarkSent(ctx, again[1:2], now) // b sent aggregate 2's head
		require.NoError(t, err)
		_, err = o.store.Release(ctx, []outbox.Message{again[0], again[2]})
		require.NoError(t, err)

		// a's late acknowledgement of both: aggregate 1's is refused too, since
		// b re-claimed it; aggregate 2's second event is free now anyway.
		next, fenced, err := o.store.MarkSentAndClaim(ctx, first, now, "a", 10, now)
		require.NoError(t, err)
		require.Equal(t, 2, fenced)
		require.Equal(t, []int64{rows[0].ID, rows[3].ID, rows[4].ID}, ids(next))

		// Now a clean one: the acknowledged head's successor is claimed in
		// the same transaction.
		more, fenced, err := o.store.MarkSentAndClaim(ctx, next[:1], now, "a", 10, now)
		require.NoError(t, err)
		require.Zero(t, fenced)
		require.Equal(t, []int64{rows[2].ID}, ids(more))
		require.Equal(t, outbox.StatusSent, o.row(t, rows[0].ID).Status)
		for _, m := range append(more, next[1:]...) {
			got := o.row(t, m.ID)
			require.Equal(t, outbox.StatusProcessing, got.Status)
			require.Equal(t, m.Version, got.Version)
		}

		// Acknowledgements with nothing left to claim are still written.
		none, fenced, err := o.store.MarkSentAndClaim(ctx, append(more, next[1:]...), now, "a", 10, now)
		require.NoError(t, err)
		require.Zero(t, fenced)
		require.Empty(t, none)
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, o.row(t, m.ID).Status)
		}
	})
}

// Two claimers polling one backlog at once each claim a full batch: the
// second finds the oldest heads held by the first (claimed, not committed)
// and claims the next heads instead of a short or empty batch. Neither takes
// an aggregate's second event while its first is held. SQLite is left out:
// its one writer makes the second claimer wait for the first's commit. On
// PostgreSQL a claim is one statement, committed when it returns: there the
// first claim's statement in flight is a transaction holding the locks it
// takes on the oldest heads, as that statement does until its commit.
func TestConcurrentClaimersEachClaimAFullBatchOfDistinctHeads(t *testing.T) {
	t.Parallel()
	for _, dialect := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			o := setup(t, databasetest.New(t, dialect))
			ctx := context.Background()
			const batch = 5
			// Aggregates 1..12, two events each, an aggregate's events side by
			// side: the heads are every other row.
			var aggregates []int64
			for a := int64(1); a <= 12; a++ {
				aggregates = append(aggregates, a, a)
			}
			rows := o.append(t, t0, aggregates...)
			heads := func(from, to int) []int64 { // first events of aggregates from..to
				var out []int64
				for a := from; a <= to; a++ {
					out = append(out, rows[2*(a-1)].ID)
				}
				return out
			}
			now := t0.Add(time.Second)

			// b claims the moment a's claim has written, before a commits.
			var (
				second    []outbox.Message
				secondErr error
				once      atomic.Bool
			)
			var first []outbox.Message
			if o.store.ClaimsInOneStatement() {
				require.NoError(t, o.db.Transaction(func(tx *gorm.DB) error {
					var locked []int64
					if err := tx.Raw("SELECT id FROM outbox WHERE id IN ? FOR UPDATE", heads(1, 5)).Scan(&locked).Error; err != nil {
						return err
					}
					require.Len(t, locked, 5)
					second, secondErr = o.store.Claim(ctx, "b", batch, now)
					once.Store(true)
					return nil
				}))
				var err error
				first, err = o.store.Claim(ctx, "a", batch, now)
				require.NoError(t, err)
			} else {
				databasetest.After(t, o.db.DB, databasetest.StmtUpdate|databasetest.StmtRow, func(tx *gorm.DB) {
					if strings.HasPrefix(tx.Statement.SQL.String(), "UPDATE") && once.CompareAndSwap(false, true) {
						second, secondErr = o.store.Claim(ctx, "b", batch, now)
					}
				})
				var err error
				first, err = o.store.Claim(ctx, "a", batch, now)
				require.NoError(t, err)
			}
			require.True(t, once.Load(), "b did not claim during a's claim")
			require.NoError(t, secondErr)

			require.Equal(t, heads(1, 5), ids(first))
			require.Equal(t, heads(6, 10), ids(second))
			for owner, claimed := range map[string][]outbox.Message{"a": first, "b": second} {
				for _, m := range claimed {
					got := o.row(t, m.ID)
					require.Equal(t, outbox.StatusProcessing, got.Status)
					require.Equal(t, owner, *got.ClaimedBy)
					require.Equal(t, m.Version, got.Version)
				}
			}
			// Only aggregates 11 and 12 have a head left.
			rest, err := o.store.Claim(ctx, "c", 10, now)
			require.NoError(t, err)
			require.Equal(t, heads(11, 12), ids(rest))
		})
	}
}

// unsent_aggregate_id (migration 00004), which the per-key order check
// reads, is the aggregate id exactly while a row holds its aggregate:
// PENDING, RETRY, PROCESSING, or FAIL not discarded; NULL once SENT or
// discarded.
func TestUnsentAggregateIDFollowsStatus(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		m := o.append(t, t0, 77)[0]
		unsent := func() *int64 {
			var v sql.NullInt64
			require.NoError(t, o.db.DB.Raw("SELECT unsent_aggregate_id FROM outbox WHERE id = ?", m.ID).Row().Scan(&v))
			if !v.Valid {
				return nil
			}
			return &v.Int64
		}
		for _, c := range []struct {
			status    outbox.Status
			discarded bool
			holds     bool
		}{
			{outbox.StatusPending, false, true},
			{outbox.StatusProcessing, false, true},
			{outbox.StatusRetry, false, true},
			{outbox.StatusFail, false, true},
			{outbox.StatusFail, true, false},
			{outbox.StatusSent, false, false},
		} {
			changes := map[string]any{"status": c.status, "discarded_at": nil}
			if c.discarded {
				changes["discarded_at"] = t0
			}
			require.NoError(t, o.db.DB.Model(&outbox.Message{}).Where("id = ?", m.ID).Updates(changes).Error)
			if c.holds {
				require.NotNil(t, unsent(), "%s discarded=%v", c.status, c.discarded)
				require.Equal(t, int64(77), *unsent())
			} else {
				require.Nil(t, unsent(), "%s discarded=%v", c.status, c.discarded)
			}
		}
	})
}

// A claim with a zero now runs on the database's clock, read inside the
// claim's transaction: a RETRY row is due only once that clock has passed
// its next_attempt_at, and the claimed rows are stamped with that clock's
// time, as stored.
func TestClaimOnTheDatabaseClock(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2, 3)
		before, err := o.store.Now(ctx)
		require.NoError(t, err)
		// Aggregate 2's head is a retry due in an hour, aggregate 3's one
		// due a second ago, by the database's clock.
		for id, at := range map[int64]time.Time{rows[1].ID: before.Add(time.Hour), rows[2].ID: before.Add(-time.Second)} {
			require.NoError(t, o.db.Model(&outbox.Message{}).Where("id = ?", id).
				Updates(map[string]any{"status": outbox.StatusRetry, "retry_count": 1, "next_attempt_at": at}).Error)
		}

		claimed, fenced, err := o.store.MarkSentAndClaim(ctx, nil, time.Time{}, "a", 10, time.Time{})
		require.NoError(t, err)
		require.Zero(t, fenced)
		after, err := o.store.Now(ctx)
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID, rows[2].ID}, ids(claimed))
		for _, m := range claimed {
			require.NotNil(t, m.ClaimedAt)
			require.False(t, m.ClaimedAt.Before(before), "claimed_at %v before the claim began (%v)", m.ClaimedAt, before)
			require.False(t, m.ClaimedAt.After(after), "claimed_at %v after the claim ended (%v)", m.ClaimedAt, after)
			got := o.row(t, m.ID)
			require.Equal(t, outbox.StatusProcessing, got.Status)
			require.Equal(t, m.Version, got.Version)
			require.NotNil(t, got.ClaimedAt)
			require.True(t, got.ClaimedAt.Equal(*m.ClaimedAt), "stored %v, returned %v", got.ClaimedAt, m.ClaimedAt)
		}

		// Acknowledged with the next claim: the held retry stays unclaimed.
		next, fenced, err := o.store.MarkSentAndClaim(ctx, claimed, after, "a", 10, time.Time{})
		require.NoError(t, err)
		require.Zero(t, fenced)
		require.Empty(t, next)
		require.Equal(t, outbox.StatusRetry, o.row(t, rows[1].ID).Status)
		for _, m := range claimed {
			require.Equal(t, outbox.StatusSent, o.row(t, m.ID).Status)
		}
	})
}

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

// BenchmarkMarkSentAndClaim is the relay's database work per batch alone,
// as a pipelined relay does it: each full batch acknowledged with the
// claim of the next (MarkSentAndClaim on the database's clock), draining
// 10,000 seeded events (2,000 posts x 5) at batch 500. ms/claim is the
// time of one such transaction, the bound of a pipelined relay whose send
// is faster.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 \
//	  go test -run '^$' -bench BenchmarkMarkSentAndClaim -benchtime 3x ./internal/send/outbox/
func BenchmarkMarkSentAndClaim(b *testing.B) {
	const events, batch = 10000, 500
	ctx := context.Background()
	for _, dialect := range databasetest.Dialects {
		b.Run(fmt.Sprintf("%s/batch=%d", dialect, batch), func(b *testing.B) {
			db := databasetest.New(b, dialect)
			store := outbox.NewStore(db)
			var total time.Duration
			claims := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				relaytest.Seed(b, db.DB, events/5, 5, time.Now().Add(-time.Second))
				if dialect == database.PostgreSQL {
					require.NoError(b, db.Exec("ANALYZE outbox").Error)
				}
				b.StartTimer()
				var held []outbox.Message
				sent := 0
				for {
					start := time.Now()
					next, fenced, err := store.MarkSentAndClaim(ctx, held, time.Now(), "bench", batch, time.Time{})
					total += time.Since(start)
					claims++
					require.NoError(b, err)
					require.Zero(b, fenced)
					sent += len(held)
					if len(next) == 0 {
						break
					}
					held = next
				}
				require.Equal(b, events, sent)
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(claims), "ms/claim")
			b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
		})
	}
}

// BenchmarkMarkSentAndClaimConcurrently drains one backlog of 10,000 seeded
// events (2,000 posts x 5, so at most 2,000 heads at a time) with 1, 2 and 4
// claimers at once, each acknowledging its batch of 500 with the claim of
// the next (MarkSentAndClaim, no broker), as pipelined relays on one
// database do. events/s is of the whole drain; short/claim counts the claims
// that came back short or empty, the races a claimer lost.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 \
//	  go test -run '^$' -bench BenchmarkMarkSentAndClaimConcurrently -benchtime 1x ./internal/send/outbox/
func BenchmarkMarkSentAndClaimConcurrently(b *testing.B) {
	const posts, perPost, batch = 2000, 5, 500
	for _, dialect := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		b.Run(string(dialect), func(b *testing.B) {
			db := databasetest.New(b, dialect)
			store := outbox.NewStore(db)
			for _, claimers := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("claimers=%d", claimers), func(b *testing.B) {
					var total time.Duration
					var claims, short, sent atomic.Int64
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						require.NoError(b, db.Exec("DELETE FROM outbox").Error)
						relaytest.Seed(b, db.DB, posts, perPost, time.Now().Add(-time.Second))
						if dialect == database.PostgreSQL {
							require.NoError(b, db.Exec("ANALYZE outbox").Error)
						}
						b.StartTimer()
						start := time.Now()
						var wg sync.WaitGroup
						for c := range claimers {
							wg.Go(func() { drainWithClaims(b, db, store, fmt.Sprint("claimer-", c), batch, &claims, &short, &sent) })
						}
						wg.Wait()
						total += time.Since(start)
					}
					require.Equal(b, int64(posts*perPost*b.N), sent.Load())
					b.ReportMetric(float64(sent.Load())/total.Seconds(), "events/s")
					b.ReportMetric(float64(short.Load())/float64(claims.Load()), "short/claim")
				})
			}
		})
	}
}

// drainWithClaims claims and acknowledges batches as owner until no row is
// left unsent, counting its claims, the short ones and the rows it sent.
func drainWithClaims(b *testing.B, db *database.DB, store *outbox.Store, owner string, batch int, claims, short, sent *atomic.Int64) {
	ctx := context.Background()
	var held []outbox.Message
	for {
		next, fenced, err := store.MarkSentAndClaim(ctx, held, time.Now(), owner, batch, time.Time{})
		if err != nil || fenced > 0 {
			b.Errorf("claim: %v, %d fenced", err, fenced)
			return
		}
		sent.Add(int64(len(held)))
		claims.Add(1)
		if len(next) < batch {
			short.Add(1)
		}
		held = next
		if len(next) > 0 {
			continue
		}
		var left int64
		if err := db.Model(&outbox.Message{}).Where("status <> ?", outbox.StatusSent).Count(&left).Error; err != nil {
			b.Errorf("count unsent: %v", err)
			return
		}
		if left == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond) // the others hold every head
	}
}
