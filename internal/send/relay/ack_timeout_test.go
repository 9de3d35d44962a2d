package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// An acknowledgement whose write timed out behind a row lock is kept and
// written at the next poll. However the first write ended, the row is
// counted once as sent, and never as a late result refused because
// another instance had recovered the claim (posting_relay_claim_conflicts_total,
// the relay's warning): no other instance touched it.
func TestAcknowledgementWriteThatTimedOutIsCountedOnceAsSent(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		r := b.relay(t, "a", func(c *Config) { c.WriteTimeout = 300 * time.Millisecond })
		rows := b.append(t, 1)

		released := make(chan struct{})
		b.send.BeforeNextSend(func() {
			holder := db.DB.Session(&gorm.Session{NewDB: true}).Begin()
			require.NoError(t, holder.Error)
			require.NoError(t, holder.Exec("UPDATE outbox SET last_error = 'held' WHERE id = ?", rows[0].ID).Error)
			go func() {
				defer close(released)
				time.Sleep(time.Second)
				_ = holder.Rollback().Error
			}()
		})
		first, err := r.RunOnce(ctx)
		t.Logf("first poll: %+v, err %v", first, err)
		<-released
		time.Sleep(500 * time.Millisecond)
		second, err := r.RunOnce(ctx)
		require.NoError(t, err)
		_, err = r.Flush(ctx)
		require.NoError(t, err)
		t.Logf("second poll: %+v", second)

		b.requireStatus(t, rows, outbox.StatusSent, "")
		require.Equal(t, 1, first.Sent+second.Sent, "rows counted as sent")
		require.Zero(t, first.Fenced+second.Fenced, "rows counted as refused late results of a recovered claim")
	})
}
