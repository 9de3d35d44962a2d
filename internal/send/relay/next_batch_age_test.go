package relay

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A batch claimed during the previous send is sent by the next poll only
// once the database has answered that poll (its read of the database's
// clock). When that answer is slow (a
// stalled connection, a pool with no free connection), the batch ages
// meanwhile: sent after its maximum age, its send and the write of its
// results can outlast the stale limit, and another instance recovers the
// live claim and sends the rows again with an attempt spent. The age is
// judged after the answer, so such a batch is handed back and claimed afresh.
func TestNextBatchThatAgedWhileTheDatabaseAnsweredSlowlyIsClaimedAfresh(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)

		// The first read of the database's clock once armed takes 1.8 s:
		// more than a tenth of the stale limit, less than the limit. (A
		// tenth of it, 300 ms, is also how long a pipelined claim of the
		// next batch may take before it is given up, so the limit leaves a
		// loaded database room for the claims that must succeed.)
		const staleAfter, stall = 3 * time.Second, 1800 * time.Millisecond
		var armed, stalled atomic.Bool
		databasetest.Before(t, db.DB, databasetest.StmtRow|databasetest.StmtQuery, func(tx *gorm.DB) {
			if armed.Load() && isClockRead(tx.Statement.SQL.String()) && stalled.CompareAndSwap(false, true) {
				time.Sleep(stall)
			}
		})

		// The database's own clock (stale recovery needs claims really that
		// old); MaxBatchSize 1 keeps the batch at 4.
		send := relaytest.NewSender()
		relay := func(id string) *Relay {
			r, err := New(outbox.NewStore(db), send, Config{InstanceID: id, Interval: 400 * time.Millisecond,
				BatchSize: 4, MaxBatchSize: 1, StaleAfter: staleAfter, RetryBase: 20 * time.Millisecond,
				RetryMax: 40 * time.Millisecond})
			require.NoError(t, err)
			return r
		}
		a, other := relay("a"), relay("b")

		res, err := a.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Claimed, "posts 1..4's first events sent, posts 5..8's claimed for the next poll")
		require.True(t, a.hasNext())
		nextClaimed := time.Now()

		// The next poll's answer is slow; during its send, the other
		// instance looks for stale claims once the next batch's claim is
		// older than the stale limit.
		armed.Store(true)
		recovered := make(chan Result, 1)
		send.BeforeNextSend(func() {
			time.Sleep(time.Until(nextClaimed.Add(staleAfter + 100*time.Millisecond)))
			res, err := other.RunOnce(ctx)
			require.NoError(t, err)
			recovered <- res
		})
		_, err = a.Pump(ctx)
		require.NoError(t, err)
		require.True(t, stalled.Load(), "the poll read the database's clock")
		assert.Zero(t, (<-recovered).Recovered, "a live claim recovered as stale")

		deadline := time.Now().Add(10 * time.Second)
		for relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] < int64(len(rows)) {
			require.True(t, time.Now().Before(deadline), "not all sent: %v", relaytest.CountByStatus(t, db.DB))
			for _, r := range []*Relay{a, other} {
				// A next batch whose claim outlasts a tenth of the stale
				// limit is given up (and handed back by the next poll):
				// the relay's answer to a slow database, not a failure.
				_, err := r.Pump(ctx)
				if !errors.Is(err, context.DeadlineExceeded) {
					require.NoError(t, err)
				}
				_, err = r.Flush(ctx)
				require.NoError(t, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, m := range rows {
			require.Equal(t, 1, send.Sends(m.EventID), "row %d sends", m.ID)
		}
		requireOrderedOnce(t, rows, send.SentIDs())
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
	})
}

// A batch whose poll was stopped between claim and send is kept for the
// next poll, which sends it first. What that poll writes after the send
// (sent_at, a retry's next_attempt_at) is timed by the database's clock, no
// earlier than the batch's claim: a retry timed from an earlier or empty
// time would be due at once, its backoff skipped.
func TestBatchKeptAfterAStopBetweenClaimAndSendIsTimedAfterItsClaim(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })
		b.append(t, 1, 2)
		// A full batch: sent, and the claim beside its send finds nothing.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Claimed)
		require.False(t, r.hasNext())

		rows := b.append(t, 3, 4)
		stopped, stop := context.WithCancel(ctx)
		r.testHooks().afterClaim = stop
		_, err = r.RunOnce(stopped)
		require.ErrorIs(t, err, context.Canceled)
		r.testHooks().afterClaim = nil

		b.send.Answer("4", errors.New("record too large"))
		_, err = r.RunOnce(ctx)
		require.NoError(t, err)
		_, err = r.Flush(ctx)
		require.NoError(t, err)

		sent, retried := b.row(t, rows[0].ID), b.row(t, rows[1].ID)
		require.Equal(t, outbox.StatusSent, sent.Status)
		require.False(t, sent.SentAt.Before(*sent.ClaimedAt), "sent_at %v before claimed_at %v", sent.SentAt, sent.ClaimedAt)
		require.Equal(t, outbox.StatusRetry, retried.Status)
		require.False(t, retried.NextAttemptAt.Before(retried.ClaimedAt.Add(time.Second/2)),
			"next_attempt_at %v: the retry's backoff (at least 500ms) not after claimed_at %v", retried.NextAttemptAt, retried.ClaimedAt)
	})
}

// isClockRead reports whether query is a read of the database's clock
// alone (database.Now).
func isClockRead(query string) bool {
	switch strings.TrimSpace(query) {
	case "SELECT clock_timestamp()", "SELECT CURRENT_TIMESTAMP(6)", "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')":
		return true
	}
	return false
}

// candidatesRead reports whether tx runs the read of due rows a claim
// starts from (outbox.Store's candidates), and whether in a transaction:
// the claim's own read, where outside one it is the poll's plain look for a
// due row before it opens its write transaction.
func candidatesRead(tx *gorm.DB) (read, inTx bool) {
	// Read with a given time, or with the database's clock as a column
	// around the same query.
	if !strings.Contains(tx.Statement.SQL.String(), "SELECT id, created FROM (") {
		return false, false
	}
	_, inTx = tx.Statement.ConnPool.(gorm.TxCommitter)
	return true, inTx
}
