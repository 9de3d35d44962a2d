package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// The acknowledgement of up to 1,000 claimed rows is one UPDATE that
// commits on its own, without a transaction around it; a row whose claim
// another instance recovered meanwhile is fenced as before. More rows take
// one UPDATE per 1,000, in one transaction, so that they are written all
// or none.
func TestMarkSentWritesUpToAThousandRowsInOneStatementOutsideATransaction(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		var (
			mu      sync.Mutex
			updates []bool // per UPDATE: inside a transaction
		)
		databasetest.Before(t, o.db.DB, databasetest.StmtUpdate, func(tx *gorm.DB) {
			_, inTx := tx.Statement.ConnPool.(gorm.TxCommitter)
			mu.Lock()
			defer mu.Unlock()
			updates = append(updates, inTx)
		})
		taken := func() []bool {
			mu.Lock()
			defer mu.Unlock()
			out := updates
			updates = nil
			return out
		}

		rows := o.append(t, t0, 1, 2, 3)
		claimed, err := o.store.Claim(ctx, "a", 10, t0.Add(time.Second))
		require.NoError(t, err)
		require.Len(t, claimed, 3)
		// Another instance recovered the third row's claim: its version moved on.
		require.NoError(t, o.db.DB.Exec("UPDATE outbox SET version = version + 1 WHERE id = ?", rows[2].ID).Error)
		taken()

		at := t0.Add(2 * time.Second)
		fenced, err := o.store.MarkSent(ctx, claimed, at)
		require.NoError(t, err)
		require.Equal(t, 1, fenced)
		require.Equal(t, []bool{false}, taken(), "UPDATEs, each inside a transaction or not")
		for _, m := range rows[:2] {
			r := o.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, r.Status)
			require.NotNil(t, r.SentAt)
			require.True(t, r.SentAt.Equal(at), "sent_at %v", r.SentAt)
		}
		require.Equal(t, outbox.StatusProcessing, o.row(t, rows[2].ID).Status, "the recovered claim is left to its new holder")

		ids := make([]int64, 1001)
		for i := range ids {
			ids[i] = int64(100 + i)
		}
		many := o.append(t, t0, ids...)
		claimed, err = o.store.Claim(ctx, "a", len(many), t0.Add(time.Hour))
		require.NoError(t, err)
		require.Len(t, claimed, len(many))
		taken()
		fenced, err = o.store.MarkSent(ctx, claimed, at)
		require.NoError(t, err)
		require.Zero(t, fenced)
		require.Equal(t, []bool{true, true}, taken(), "UPDATEs, each inside a transaction or not")
		var sent int64
		require.NoError(t, o.db.DB.Model(&outbox.Message{}).Where("status = ? AND aggregate_id >= 100", outbox.StatusSent).Count(&sent).Error)
		require.Equal(t, int64(len(many)), sent)
	})
}
