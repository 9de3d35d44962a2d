package outbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Over a backlog of 100,000 rows, half of them sent, the claim's read of
// due heads is planned in the backend that runs it: no Gather, even where
// the session's costs favour parallel plans. Over a spike's outbox the
// planner chose two workers for it, whose start cost several times what
// the read of the first 1,000 heads of an index does (migration 00013).
// Its two index scans, PENDING and due RETRY, are merged in (created, id)
// order, not sorted, also when the read carries the database's clock (the
// relay's claims). The statements are the ones the claims run, captured as
// they run them: the read and claim of a window in one statement.
func TestClaimReadsABacklogWithoutParallelWorkers(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.PostgreSQL)
	require.NoError(t, db.Exec(`INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, next_attempt_at)
		SELECT 'spike-' || g, 'POSTING_RESERVATION_EVENT', g,
			jsonb_build_object('postId', g, 'title', 'spike ' || g, 'content', repeat('c', 200)),
			now() - interval '1 hour' + g * interval '1 millisecond', 'PENDING', now()
		FROM generate_series(1, 100000) g`).Error)
	// As a relay leaves them: claimed, then sent, each a new row version;
	// analyzed as the statistics keeper does, not vacuumed.
	require.NoError(t, db.Exec("UPDATE outbox SET status = 'PROCESSING' WHERE id <= 50000").Error)
	require.NoError(t, db.Exec("UPDATE outbox SET status = 'SENT', sent_at = now() WHERE id <= 50000").Error)
	require.NoError(t, db.Exec("ANALYZE outbox").Error)

	var mu sync.Mutex
	var sql string
	var vars []any
	databasetest.After(t, db.DB, databasetest.StmtRow, func(tx *gorm.DB) {
		q := tx.Statement.SQL.String()
		// The last such statement: a claim's read of its window (a claim
		// that looks for a due row first reads one beforehand).
		if strings.Contains(q, "SELECT id, created FROM (") {
			mu.Lock()
			defer mu.Unlock()
			sql, vars = q, append([]any(nil), tx.Statement.Vars...)
		}
	})
	// With a given time, and with the database's clock (a zero time).
	for _, now := range []time.Time{t0, {}} {
		mu.Lock()
		sql = ""
		mu.Unlock()
		claimed, err := outbox.NewStore(db).Claim(context.Background(), "plan-test", 1000, now)
		require.NoError(t, err)
		require.Len(t, claimed, 1000)
		mu.Lock()
		require.NotEmpty(t, sql, "the claim's candidate read was not captured")
		stmt, args := sql, vars
		mu.Unlock()
		plan := explainCheaplyParallel(t, db, stmt, args)
		require.NotContains(t, plan, "Gather", "the claim's read is planned in parallel:\n%s", plan)
		require.Contains(t, plan, "Merge Append", "the claim's two scans are not merged in order:\n%s", plan)
		require.Contains(t, plan, "Index Scan using outbox_pkey on outbox x",
			"the claim does not lock its window's rows by primary key:\n%s", plan)
	}
}

// explainCheaplyParallel is the plan of stmt with args under costs that
// make parallel plans cheap.
func explainCheaplyParallel(t *testing.T, db *database.DB, stmt string, args []any) string {
	t.Helper()
	var plan []string
	require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
		// Parallel plans made cheap for the planner: over the backlog of a
		// spike (rows scattered among their older versions) its own costs
		// chose one, which this small table does not reproduce.
		for _, set := range []string{"max_parallel_workers_per_gather = 2", "parallel_setup_cost = 0",
			"parallel_tuple_cost = 0", "min_parallel_index_scan_size = 0", "min_parallel_table_scan_size = 0"} {
			if err := tx.Exec("SET LOCAL " + set).Error; err != nil {
				return err
			}
		}
		rows, err := tx.Raw("EXPLAIN "+stmt, args...).Rows()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			plan = append(plan, line)
		}
		return rows.Err()
	}))
	return strings.Join(plan, "\n")
}
