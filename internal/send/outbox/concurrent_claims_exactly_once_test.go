package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
)

// backlog inserts n PENDING rows, aggregates rows apart per aggregate
// (aggregate g % aggregates), three rows sharing each created.
func backlog(t *testing.T, db *database.DB, n, aggregates int) {
	t.Helper()
	require.NoError(t, db.Exec(fmt.Sprintf(`INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, next_attempt_at)
		SELECT 'c-' || g, 'POSTING_RESERVATION_EVENT', g %% %d,
			jsonb_build_object('postId', g %% %d),
			now() - interval '1 hour' + (g / 3) * interval '1 millisecond', 'PENDING', now() - interval '1 hour'
		FROM generate_series(1, %d) g`, aggregates, aggregates, n)).Error)
}

// Four claimers on one PostgreSQL backlog (several events per aggregate,
// equal created values), each acknowledging what it claimed through
// MarkSentAndClaim, as relays with deferred acknowledgements do: every row
// is claimed exactly once, every claimed row was its aggregate's head (all
// earlier rows of its aggregate SENT when the claim returned, SENT being
// final), and every row ends SENT.
func TestConcurrentClaimersClaimEachRowOnceInAggregateOrder(t *testing.T) {
	t.Parallel()
	claimConcurrently(t, databasetest.New(t, database.PostgreSQL), 3000, 600)
}

// The same on a few hot aggregates (100 events each): each claim can take
// only each aggregate's one head, the successor of a row another claimer
// just acknowledged.
func TestConcurrentClaimersOnHotAggregatesClaimEachRowOnceInOrder(t *testing.T) {
	t.Parallel()
	claimConcurrently(t, databasetest.New(t, database.PostgreSQL), 300, 3)
}

// The same four claimers through PgBouncer in transaction pooling: each
// statement of the claim may run on another server session, so nothing
// may rest on a session's state between statements.
func TestConcurrentClaimersThroughTransactionPoolingClaimEachRowOnce(t *testing.T) {
	t.Parallel()
	pooled := pgbouncertest.Start(t, databasetest.PostgresURL(t, ""), pgbouncertest.Transaction)
	db := databasetest.Open(t, pooled)
	_, err := migrations.Apply(context.Background(), db, nil)
	require.NoError(t, err)
	claimConcurrently(t, db, 3000, 600)
}

func claimConcurrently(t *testing.T, db *database.DB, n, aggregates int) {
	const claimers, limit = 4, 50
	backlog(t, db, n, aggregates)
	store := outbox.NewStore(db)
	require.True(t, store.ClaimsInOneStatement())
	ctx := context.Background()

	var mu sync.Mutex
	claims := map[int64]int{}
	var problems []string
	sentTotal := 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for c := 0; c < claimers; c++ {
		wg.Add(1)
		go func(owner string) {
			defer wg.Done()
			var held []outbox.Message
			for time.Now().Before(deadline) {
				claimed, fenced, err := store.MarkSentAndClaim(ctx, held, t0, owner, limit, time.Time{})
				if err != nil {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s: %v", owner, err))
					mu.Unlock()
					return
				}
				mu.Lock()
				if fenced != 0 {
					problems = append(problems, fmt.Sprintf("%s: %d acknowledgements fenced", owner, fenced))
				}
				sentTotal += len(held)
				for _, m := range claimed {
					claims[m.ID]++
					if m.Status != outbox.StatusProcessing || m.ClaimedBy == nil || *m.ClaimedBy != owner {
						problems = append(problems, fmt.Sprintf("row %d returned as %s by %v", m.ID, m.Status, m.ClaimedBy))
					}
				}
				done := sentTotal == n
				mu.Unlock()
				if len(claimed) > 0 {
					got := ids(claimed)
					var early []string
					err := db.Raw(`SELECT b.id || ' before ' || a.id || ' ' || a.status FROM outbox b
						JOIN outbox a ON a.aggregate_id = b.aggregate_id AND a.id < b.id
						WHERE b.id IN ? AND a.status <> 'SENT'`, got).Scan(&early).Error
					if err != nil {
						early = append(early, err.Error())
					}
					if len(early) > 0 {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("%s claimed out of order: %v", owner, early))
						mu.Unlock()
					}
				}
				held = claimed
				if done {
					return
				}
				if len(claimed) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}(fmt.Sprintf("claimer-%d", c))
	}
	wg.Wait()
	require.Empty(t, problems)
	twice := 0
	for _, k := range claims {
		if k > 1 {
			twice++
		}
	}
	require.Zero(t, twice, "rows claimed more than once")
	require.Len(t, claims, n, "rows never claimed")
	var notSent int64
	require.NoError(t, db.Model(&outbox.Message{}).Where("status <> ?", outbox.StatusSent).Count(&notSent).Error)
	require.Zero(t, notSent)
}
