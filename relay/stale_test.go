package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// holdWrites makes the next write of row wait until release: on MySQL a
// row lock on it (PostgreSQL too), on SQLite the file's write lock.
func holdWrites(t *testing.T, db *database.DB, row int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	conn, err := sqlDB.Conn(ctx)
	require.NoError(t, err)
	if db.Dialect == database.SQLite {
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		require.NoError(t, err)
	} else {
		_, err = conn.ExecContext(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, fmt.Sprintf("SELECT id FROM outbox WHERE id = %d FOR UPDATE", row))
		require.NoError(t, err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		_, err := conn.ExecContext(ctx, "COMMIT")
		require.NoError(t, err)
		require.NoError(t, conn.Close())
	}
	t.Cleanup(release)
	return release
}

// A claim is stamped with the time it was taken, not the time its poll
// began: when the poll waits on the database before claiming (here: stale
// recovery waits for a lock another transaction holds), another instance
// must not take the fresh claim for stale and send its rows a second time
// with a retry spent while the first relay is still sending them.
func TestClaimWaitingForALockIsNotBornStale(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		var ids []int64
		for p := int64(1); p <= 3; p++ {
			m, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, p, time.Now(), nil))
			require.NoError(t, err)
			ids = append(ids, m.ID)
		}
		// A claim left by a dead instance, out of retries: recovery makes it FAIL.
		dead, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, 99, time.Now(), nil))
		require.NoError(t, err)
		require.NoError(t, db.DB.Model(&outbox.Message{}).Where("id = ?", dead.ID).Updates(map[string]any{
			"status": outbox.StatusProcessing, "claimed_by": "dead", "claimed_at": time.Now().Add(-time.Hour),
			"retry_count": 3, "version": gorm.Expr("version + 1")}).Error)

		send := relaytest.NewSender()
		proceed := send.Hold() // a's send waits, so that b polls while it is in flight
		newRelay := func(id string) *Relay {
			r, err := New(outbox.NewStore(db), send, Config{InstanceID: id, Interval: 10 * time.Millisecond,
				StaleAfter: 2 * time.Second, RetryBase: 10 * time.Millisecond})
			require.NoError(t, err)
			return r
		}
		a, b := newRelay("a"), newRelay("b")

		release := holdWrites(t, db, dead.ID)
		aDone := make(chan error, 1)
		go func() { _, err := a.RunOnce(ctx); aDone <- err }()
		time.Sleep(2500 * time.Millisecond) // longer than StaleAfter: what the lock makes a's poll wait
		release()

		// b polls while a sends the rows it has just claimed.
		select {
		case <-send.Entered():
		case <-time.After(30 * time.Second):
			t.Fatal("a never sent")
		}
		resB, err := b.RunOnce(ctx)
		require.NoError(t, err)
		proceed()
		require.NoError(t, <-aDone)
		for range 50 { // let b finish whatever it took
			if _, err := b.RunOnce(ctx); err != nil {
				require.NoError(t, err)
			}
		}

		require.Zero(t, resB.Recovered, "b recovered a's live claims as stale")
		for _, id := range ids {
			var m outbox.Message
			require.NoError(t, db.DB.First(&m, id).Error)
			require.Equal(t, outbox.StatusSent, m.Status, "row %d", id)
			require.Zero(t, m.RetryCount, "row %d spent a retry (last_error %v)", id, m.LastError)
			require.Equal(t, 1, send.Sends(m.EventID), "row %d sends", id)
		}
	})
}
