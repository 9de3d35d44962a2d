package reservation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// With BatchConcurrency 1, a batch whose transaction runs (held here on
// its idempotency key by another transaction) makes the next batch wait:
// that one gives up with its context and writes nothing, and both pass
// once the first can commit.
func TestBatchesBeyondTheConcurrencyWaitTheirTurn(t *testing.T) {
	t.Parallel()
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := databasetest.New(t, d)
			svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{BatchConcurrency: 1})
			require.NoError(t, err)
			ins := func(n int) []reservation.CreateInput {
				out := make([]reservation.CreateInput, n)
				for i := range out {
					out[i] = reservation.CreateInput{Title: fmt.Sprint("post ", i), Content: "c", ScheduledAt: time.Now().Add(time.Hour)}
				}
				return out
			}
			blocker := db.Begin()
			require.NoError(t, blocker.Exec("INSERT INTO idempotency_keys (owner_id, idem_key, request_hash, post_id, response, created_at) VALUES ('', 'k', 'h', 0, '{}', ?)",
				database.Normalize(time.Now())).Error)
			first := make(chan error, 1)
			go func() {
				_, err := svc.CreateBatch(context.Background(), "k", ins(3))
				first <- err
			}()
			require.Eventually(t, func() bool { return lockWaits(t, db) > 0 }, 10*time.Second, 20*time.Millisecond,
				"the first batch waits on the key inside its transaction")

			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err = svc.CreateBatch(ctx, "", ins(2))
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorContains(t, err, "wait for a batch transaction")

			require.NoError(t, blocker.Rollback().Error)
			require.NoError(t, <-first)
			_, err = svc.CreateBatch(context.Background(), "", ins(2))
			require.NoError(t, err)
			var posts int64
			require.NoError(t, db.Model(&reservation.Post{}).Count(&posts).Error)
			require.EqualValues(t, 5, posts, "the first batch and the retried second, nothing of the one that gave up")
		})
	}
}

// lockWaits counts the sessions of db's database waiting for a lock: on
// MariaDB, whose innodb_trx does not list such an INSERT, the sessions
// running one into idempotency_keys.
func lockWaits(t *testing.T, db *database.DB) int64 {
	t.Helper()
	var n int64
	q := "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
	if db.Dialect == database.MySQL {
		q = "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND info LIKE 'INSERT INTO `idempotency_keys`%'"
	}
	require.NoError(t, db.Raw(q).Scan(&n).Error)
	return n
}
