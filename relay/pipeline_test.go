package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// appendRounds appends rounds events for each of posts 1..posts, round by
// round (every post's first event, then every post's second, ...).
func (b *bundle) appendRounds(t *testing.T, posts, rounds int) []outbox.Message {
	t.Helper()
	var ids []int64
	for range rounds {
		for p := 1; p <= posts; p++ {
			ids = append(ids, int64(p))
		}
	}
	return b.append(t, ids...)
}

// processing returns the ids of the PROCESSING rows, in id order.
func (b *bundle) processing(t *testing.T) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, b.db.Model(&outbox.Message{}).Where("status = ?", outbox.StatusProcessing).Order("id").Pluck("id", &ids).Error)
	return ids
}

// requireOrderedOnce checks that ids (in the order acknowledged) hold every
// row of rows exactly once and, per post, in outbox order.
// pumpUntilIdle polls r as its loop does (Pump) until a poll claims, sends,
// defers and releases nothing, at most max times, then flushes.
func pumpUntilIdle(t *testing.T, ctx context.Context, r *Relay, max int) {
	t.Helper()
	for range max {
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		if res.Claimed == 0 && res.Sent == 0 && res.Deferred == 0 && res.Released == 0 {
			break
		}
	}
	_, err := r.Flush(ctx)
	require.NoError(t, err)
}

func requireOrderedOnce(t *testing.T, rows []outbox.Message, ids []int64) {
	t.Helper()
	post := map[int64]int64{}
	for _, m := range rows {
		post[m.ID] = m.AggregateID
	}
	seen := map[int64]bool{}
	last := map[int64]int64{}
	for _, id := range ids {
		require.False(t, seen[id], "row %d acknowledged twice", id)
		seen[id] = true
		p, ok := post[id]
		require.True(t, ok, "unknown row %d", id)
		require.Greater(t, id, last[p], "post %d: row %d after row %d", p, id, last[p])
		last[p] = id
	}
	require.Len(t, seen, len(rows), "every row acknowledged")
}

// While a full batch is being sent, Pump claims the next one, which holds
// no event of a post that has one in the air; draining with Pump keeps
// per-post order and sends each event once.
func TestPumpClaimsTheNextBatchDuringTheSend(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2) // ids: posts 1..8 first events, then their second events
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
		release := b.send.Hold()
		type out struct {
			res Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := r.Pump(ctx)
			done <- out{res, err}
		}()
		<-b.send.Entered()
		// The first batch (posts 1..4) is in the air; the next claim takes
		// posts 5..8's first events, not the second events of posts 1..4.
		want := []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID, rows[4].ID, rows[5].ID, rows[6].ID, rows[7].ID}
		require.Eventually(t, func() bool { return len(b.processing(t)) == 8 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, want, b.processing(t))
		release()
		o := <-done
		require.NoError(t, o.err)
		require.Equal(t, 8, o.res.Claimed, "this batch and the next")
		require.True(t, r.hasNext())

		pumpUntilIdle(t, ctx, r, 10)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: 16}, relaytest.CountByStatus(t, db.DB))
	})
}

// Flush hands back a batch claimed for the next poll unchanged: PENDING,
// no attempt spent.
func TestFlushReleasesTheNextBatch(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 1)
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Claimed)
		for _, m := range rows[4:] {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status, "the next batch waits, claimed")
		}
		res, err = r.Flush(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, res.Released)
		for _, m := range rows[:4] {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status, "acknowledgements deferred or not, written")
		}
		for _, m := range rows[4:] {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusPending, got.Status)
			require.Zero(t, got.RetryCount)
		}
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID}, b.send.SentIDs())
		require.False(t, r.hasNext())
	})
}

// An unreachable broker releases the batch sent and the one claimed
// during its send: no attempt spent on either, nothing held over the backoff.
func TestPumpOutageReleasesBothBatches(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
		b.send.SetDown(unreachable)
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.True(t, res.Unavailable)
		require.Equal(t, 8, res.Released)
		require.False(t, r.hasNext())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusPending: 16}, relaytest.CountByStatus(t, db.DB))
		var retried int64
		require.NoError(t, db.Model(&outbox.Message{}).Where("retry_count > 0").Count(&retried).Error)
		require.Zero(t, retried)

		b.send.SetDown(nil)
		pumpUntilIdle(t, ctx, r, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
	})
}

// A relay that dies with two batches in the air (one being sent, one
// claimed for the next poll) loses nothing: another instance recovers
// both after the stale limit and sends every event once more, in per-post
// order; the dead relay's late acknowledgement is fenced.
func TestCrashWithTwoBatchesInFlightLosesNothing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		dyingSend := relaytest.NewSender()
		dying, err := New(b.store, dyingSend, Config{InstanceID: "dying", Interval: 20 * time.Millisecond,
			BatchSize: 4, StaleAfter: time.Minute, RetryBase: time.Second, Now: b.clock.Now})
		require.NoError(t, err)
		hang := dyingSend.Hold() // the process freezes in the send, then dies
		var wg sync.WaitGroup
		var late Result
		wg.Add(1)
		go func() {
			defer wg.Done()
			late, _ = dying.Pump(ctx)
		}()
		<-dyingSend.Entered()
		require.Eventually(t, func() bool { return len(b.processing(t)) == 8 }, 10*time.Second, 5*time.Millisecond)

		other := b.relay(t, "other", func(c *Config) { c.BatchSize = 4 })
		res, err := other.Pump(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed, "live claims are respected; the second events wait behind them")

		b.clock.Add(time.Minute + time.Second)
		res, err = other.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Recovered, "both batches recovered")
		b.clock.Add(2 * time.Second)
		pumpUntilIdle(t, ctx, other, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: 16}, relaytest.CountByStatus(t, db.DB))
		for _, m := range rows[:8] {
			got := b.row(t, m.ID)
			require.Equal(t, 1, got.RetryCount, "the recovery counted as an attempt")
			require.Equal(t, "other", *got.ClaimedBy)
		}

		// The frozen relay wakes up: its acknowledgement comes too late.
		hang()
		wg.Wait()
		require.Equal(t, 4, late.Fenced+late.Deferred, "the late batch is fenced (at once, or when its deferred write is tried)")
		_, _ = dying.Flush(ctx)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Equal(t, "other", *got.ClaimedBy, "row %d", m.ID)
		}
	})
}

// Four relays running their loops (pipelined polls) on one backlog send
// every event once and keep per-post order.
func TestPipelinedRelaysKeepPerPostOrder(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		rows := b.appendRounds(t, 60, 5)
		b.send.SetPause(time.Millisecond) // sends take a while: claims overlap them
		var relays []*Relay
		for i := range 4 {
			r := b.relay(t, "r"+string(rune('a'+i)), func(c *Config) { c.BatchSize = 7 })
			relays = append(relays, r)
		}
		for _, r := range relays {
			require.NoError(t, r.Start(context.Background()))
			t.Cleanup(r.Stop)
		}
		require.Eventually(t, func() bool {
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, time.Minute, 10*time.Millisecond)
		for _, r := range relays {
			r.Stop()
		}
		requireOrderedOnce(t, rows, b.send.SentIDs())
	})
}
