package relay

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// An idle poll looks for a due row with a plain read before it opens a
// write transaction, and finding none opens none. A loop woken by a commit
// knows rows are waiting: its claim goes straight to its transaction, with
// no plain read, one round trip less between the commit and the send. A
// wake with nothing due after all (another instance took the rows) claims
// nothing, without an error.
func TestLoopWokenByACommitClaimsWithoutLookingFirst(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second)) // rows due on the loop's real clock

		reads := countCandidateReads(t, db)
		r, loop := b.startOnWakes(t)
		counts := func() (int, int, int, int) {
			c := loop.now()
			plain, inTx := reads()
			return c.polls, c.claimed, plain, inTx
		}

		require.Eventually(t, func() bool { p, _, _, _ := counts(); return p >= 1 }, 10*time.Second, time.Millisecond)
		p, c, plain, tx := counts()
		require.Equal(t, []int{1, 0, 1, 0}, []int{p, c, plain, tx}, "polls, claimed, plain reads, reads in a transaction of the idle poll")

		rows := b.append(t, 1, 2)
		r.Wake()
		// The rows are SENT inside the woken poll or the one that follows
		// it at once, and a poll is counted once it returns: wait for both.
		require.Eventually(t, func() bool {
			if p, _, _, _ := counts(); p < 3 {
				return false
			}
			for _, m := range rows {
				if b.row(t, m.ID).Status != outbox.StatusSent {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "the woken loop did not send and record its rows")
		// The poll after one that sent rows looks for their posts' next
		// events: in the transaction that writes the acknowledgements left
		// to it (MySQL), or with a plain read, where they were written at
		// once (SQLite) or where a claim is one statement outside a
		// transaction, after a statement of their own (PostgreSQL).
		followPlain, followTx := 1, 0
		if b.store.DefersAcksToNextClaim() && !b.store.ClaimsInOneStatement() {
			followPlain, followTx = 0, 1
		}
		// The woken poll's claim: a read in its transaction, or, where a
		// claim is one statement that reads and claims outside a
		// transaction (PostgreSQL), that statement alone, with no read
		// before it either.
		wokenPlain, wokenTx := 0, 1
		if b.store.ClaimsInOneStatement() {
			wokenPlain, wokenTx = 1, 0
		}
		p, c, plain, tx = counts()
		require.Equal(t, 3, p, "polls: the idle one, the woken one, the one after it")
		require.Equal(t, 2, c, "rows claimed by the woken poll")
		require.Equal(t, 1+wokenPlain+followPlain, plain, "plain reads: none by the woken poll but its claim")
		require.Equal(t, wokenTx+followTx, tx, "reads in a transaction: the woken poll's claim")

		r.Wake()
		require.Eventually(t, func() bool { p, _, _, _ := counts(); return p >= 4 }, 10*time.Second, time.Millisecond)
		p, c, plain, tx = counts()
		require.Equal(t, []int{4, 2, 1 + 2*wokenPlain + followPlain, 2*wokenTx + followTx}, []int{p, c, plain, tx},
			"polls, claimed, plain reads, reads in a transaction after a wake with nothing due")
		require.Empty(t, loop.now().errs)
	})
}

// Another instance's commit (WakeForPeer, a PostgreSQL notification) wakes
// the loop too, but that instance's relay most often claims the rows first:
// the poll looks with a plain read before it opens a claim transaction, and
// a wake with nothing left opens none. Rows still due are claimed and sent.
func TestLoopWokenForAnotherInstancesCommitLooksBeforeItClaims(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.clock.Set(time.Now().Add(-time.Second)) // rows due on the loop's real clock
		reads := countCandidateReads(t, db)
		r, loop := b.startIdle(t)
		counts := func() []int {
			c := loop.now()
			plain, inTx := reads()
			return []int{c.polls, c.claimed, plain, inTx}
		}

		r.WakeForPeer()
		require.Eventually(t, func() bool { return loop.now().polls >= 2 }, 10*time.Second, time.Millisecond)
		require.Equal(t, []int{2, 0, 2, 0}, counts(), "polls, claimed, plain reads, reads in a transaction after a peer's wake with nothing due")

		rows := b.append(t, 1, 2)
		r.WakeForPeer()
		require.Eventually(t, func() bool {
			if loop.now().polls < 4 {
				return false
			}
			for _, m := range rows {
				if b.row(t, m.ID).Status != outbox.StatusSent {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond, "the rows of a peer's wake were not sent")
		// The woken poll: a plain read that finds them, then its claim (on
		// PostgreSQL one statement that reads and claims); the poll after
		// it, as in TestLoopWokenByACommitClaimsWithoutLookingFirst.
		followPlain, followTx := 1, 0
		if b.store.DefersAcksToNextClaim() && !b.store.ClaimsInOneStatement() {
			followPlain, followTx = 0, 1
		}
		wokenPlain, wokenTx := 1, 1
		if b.store.ClaimsInOneStatement() {
			wokenTx = 0
		}
		require.Equal(t, []int{4, 2, 2 + wokenPlain + followPlain, wokenTx + followTx}, counts(),
			"polls, claimed, plain reads, reads in a transaction")
		require.Empty(t, loop.now().errs)
	})
}

// countCandidateReads counts the claim's candidate reads on db from now on,
// those made with a plain read and those inside a transaction.
func countCandidateReads(t *testing.T, db *database.DB) func() (plain, inTx int) {
	var (
		mu          sync.Mutex
		plain, inTx int
	)
	databasetest.Before(t, db.DB, databasetest.StmtQuery|databasetest.StmtRow, func(tx *gorm.DB) {
		read, transaction := candidatesRead(tx)
		if !read {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if transaction {
			inTx++
		} else {
			plain++
		}
	})
	return func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return plain, inTx
	}
}
