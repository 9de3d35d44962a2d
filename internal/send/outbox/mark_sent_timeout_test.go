package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// The relay reads an error from MarkSent and Release as "nothing was
// written": it keeps the acknowledgements (or the rows to release) and
// writes them again, where a second write of what did land is fenced and
// counted as another instance's recovery. A write whose caller gave up
// while it waited for a row lock (the relay's WriteTimeout) must therefore
// not land afterwards.
func TestMarkSentThatGaveUpWaitingForALockWritesNothing(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1)
		claimed, err := o.store.Claim(ctx, "a", 10, t0.Add(time.Second))
		require.NoError(t, err)
		require.Len(t, claimed, 1)

		// Another transaction holds the row for a second (an operator's
		// statement, a purge, another instance's recovery).
		holder := o.db.DB.Session(&gorm.Session{NewDB: true}).Begin()
		require.NoError(t, holder.Error)
		require.NoError(t, holder.Exec("UPDATE outbox SET last_error = 'held' WHERE id = ?", rows[0].ID).Error)
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(time.Second)
			_ = holder.Rollback().Error
		}()

		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = o.store.MarkSent(wctx, claimed, t0.Add(2*time.Second))
		cancel()
		<-released
		if err == nil {
			return // the write waited for the lock and reported success
		}
		t.Logf("MarkSent: %v", err)
		time.Sleep(500 * time.Millisecond) // a statement the server still ran has finished by now
		got := o.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusProcessing, got.Status, "MarkSent reported %v, and the row was written anyway", err)
		require.Equal(t, claimed[0].Version, got.Version)
	})
}
