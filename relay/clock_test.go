package relay

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
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

// Two relays whose clocks are minutes apart share the database's clock for
// claims, retries and stale recovery: neither takes the other's live claims
// for stale, so every event is sent once and no retry is spent. (With each
// relay's own clock, the one 3 minutes ahead recovered the other's claims
// while they were being sent.)
func TestRelaysWithSkewedClocksSendEachEventOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		const posts, perPost = 60, 5
		var ids []int64
		for range perPost {
			for p := int64(1); p <= posts; p++ {
				m, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, p, time.Now(), nil))
				require.NoError(t, err)
				ids = append(ids, m.ID)
			}
		}
		send := relaytest.NewSender()
		send.SetPause(15 * time.Millisecond) // a send that takes a while: claims stay in flight
		skews := map[string]time.Duration{"ahead": 3 * time.Minute, "behind": -3 * time.Minute, "on-time": 0}
		var relays []*Relay
		for id, skew := range skews {
			r, err := New(outbox.NewStore(db), send, Config{InstanceID: id, Interval: 10 * time.Millisecond,
				BatchSize: 10, StaleAfter: 2 * time.Minute, RetryBase: time.Second,
				Now: func() time.Time { return time.Now().Add(skew) }})
			require.NoError(t, err)
			relays = append(relays, r)
		}
		for _, r := range relays {
			require.NoError(t, r.Start(ctx))
		}
		require.Eventually(t, func() bool {
			var n int64
			require.NoError(t, db.DB.Model(&outbox.Message{}).Where("status = ?", outbox.StatusSent).Count(&n).Error)
			return n == int64(len(ids))
		}, 60*time.Second, 20*time.Millisecond, "every event SENT")
		for _, r := range relays {
			r.Stop()
		}

		var rows []outbox.Message
		require.NoError(t, db.DB.Order("id").Find(&rows).Error)
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, m.Status, "row %d", m.ID)
			require.Zero(t, m.RetryCount, "row %d spent a retry (last_error %v)", m.ID, m.LastError)
			require.Equal(t, 1, send.Sends(m.EventID), "row %d sends", m.ID)
		}
	})
}

// An event written by an instance whose clock runs 10 minutes ahead does not
// wait those 10 minutes, nor hold its post's later events.
func TestEventFromAnInstanceAheadIsDueAtOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		first, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, 7, time.Now().Add(10*time.Minute), nil))
		require.NoError(t, err)
		second, err := outbox.Append(db.DB, eventtest.Outbox(t, event.PostingEvent, 7, time.Now(), nil))
		require.NoError(t, err)
		send := relaytest.NewSender()
		r, err := New(outbox.NewStore(db), send, Config{InstanceID: "r", Interval: 10 * time.Millisecond})
		require.NoError(t, err)
		for range 2 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
		}
		require.Equal(t, []int64{first.ID, second.ID}, send.SentIDs())
	})
}

// A write of SENT that fails keeps its acknowledgements: the next poll
// writes them, so the event is sent once, ends SENT with no retry spent, and
// the post's next event follows in that poll instead of after the stale
// limit.
func TestFailedSentWriteKeepsTheAcknowledgements(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 1)
		failed := failSentWriteOnce(t, db)
		r := b.relay(t, "a")

		res, err := r.RunOnce(ctx)
		require.ErrorIs(t, err, driver.ErrBadConn)
		require.True(t, failed.Load())
		require.Equal(t, 1, res.Claimed)
		require.Equal(t, outbox.StatusProcessing, b.row(t, rows[0].ID).Status, "not written yet")

		// The next poll: the first event's SENT, then its successor claimed,
		// sent and written.
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Claimed)
		require.Equal(t, 2, res.Sent)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs(), "each sent once, in order")
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Zero(t, got.RetryCount)
		}
	})
}

// failSentWriteOnce fails the first write of SENT through db as a lost
// connection would; the returned flag tells whether it has.
func failSentWriteOnce(t *testing.T, db *database.DB) *atomic.Bool {
	t.Helper()
	var failed atomic.Bool
	databasetest.Fail(t, db.DB, databasetest.StmtUpdate, driver.ErrBadConn, func(tx *gorm.DB) bool {
		m, ok := tx.Statement.Dest.(map[string]any)
		return ok && m["status"] == outbox.StatusSent && failed.CompareAndSwap(false, true)
	})
	return &failed
}

// The loop writes kept acknowledgements before it pauses after the error,
// so nothing waits for stale recovery even when no new row comes.
func TestLoopWritesKeptAcknowledgementsBeforePausing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		row := b.append(t, 1)[0]
		failed := failSentWriteOnce(t, db)
		r := b.relay(t, "a", func(c *Config) { c.Interval = time.Hour; c.OutageBackoffMax = time.Hour; c.StaleAfter = 3 * time.Hour })
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
		require.Eventually(t, func() bool { return b.row(t, row.ID).Status == outbox.StatusSent }, 10*time.Second, 10*time.Millisecond)
		require.True(t, failed.Load())
		require.Zero(t, b.row(t, row.ID).RetryCount)
		require.Equal(t, []int64{row.ID}, b.send.SentIDs())
	})
}

// The relay refuses a stale limit that a healthy slow send and the write of
// its results could outlast: another instance would send the rows again.
func TestNewRefusesAStaleLimitTheSenderCouldOutlast(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	send := relaytest.NewSender()
	send.SetBound(30 * time.Second)
	cfg := Config{InstanceID: "a", StaleAfter: 11 * time.Second}
	_, err := New(outbox.NewStore(db), send, cfg)
	var sl *StaleLimitError
	require.True(t, errors.As(err, &sl), "got %v", err)
	require.Equal(t, 75*time.Second, sl.Min, "(30s send + 30s write) * 5/4")
	require.Equal(t, 11*time.Second, sl.StaleAfter)

	cfg.StaleAfter = 75 * time.Second
	_, err = New(outbox.NewStore(db), send, cfg)
	require.ErrorAs(t, err, &sl, "the minimum itself is not more than the bound")

	cfg.StaleAfter, cfg.WriteTimeout = 20*time.Second, 5*time.Second
	send.SetBound(10 * time.Second)
	_, err = New(outbox.NewStore(db), send, cfg)
	require.NoError(t, err, "(10s + 5s) * 5/4 = 18.75s < 20s")

	// A sender that does not know its bound is not checked.
	_, err = New(outbox.NewStore(db), relaytest.NewSender(), Config{InstanceID: "a", StaleAfter: 2 * time.Second, Interval: 100 * time.Millisecond})
	require.NoError(t, err)
}
