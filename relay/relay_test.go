package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/internal/clocktest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// unreachable is the answer of a sender whose broker is down.
var unreachable = fmt.Errorf("dial tcp: connection refused: %w", ErrUnavailable)

type bundle struct {
	db    *database.DB
	store *outbox.Store
	clock *clocktest.Clock
	send  *relaytest.Sender
}

func setup(t *testing.T, db *database.DB) *bundle {
	clock := clocktest.New(t0)
	// The test moves the shared (database) clock and the relay's own together.
	return &bundle{db: db, store: outbox.NewStore(db).WithClock(clock.Now), clock: clock, send: relaytest.NewSender()}
}

func (b *bundle) relay(t *testing.T, id string, mutate ...func(*Config)) *Relay {
	t.Helper()
	// MaxBatchSize 1: the batch stays the one a test sets (batch_test.go
	// covers its growth).
	cfg := Config{InstanceID: id, Interval: 20 * time.Millisecond, BatchSize: 100, MaxBatchSize: 1, StaleAfter: time.Minute,
		RetryBase: time.Second, RetryMax: time.Minute, Now: b.clock.Now}
	for _, m := range mutate {
		m(&cfg)
	}
	r, err := New(b.store, b.send, cfg)
	require.NoError(t, err)
	return r
}

func (b *bundle) append(t *testing.T, postIDs ...int64) []outbox.Message {
	t.Helper()
	var out []outbox.Message
	for _, id := range postIDs {
		m, err := outbox.Append(b.db.DB, eventtest.Outbox(t, event.PostingEvent, id, b.clock.Now(), nil))
		require.NoError(t, err)
		out = append(out, *m)
		b.clock.Add(time.Millisecond)
	}
	return out
}

func (b *bundle) row(t *testing.T, id int64) outbox.Message {
	t.Helper()
	var m outbox.Message
	require.NoError(t, b.db.DB.First(&m, id).Error)
	return m
}

var errRejected = errors.New("kafka: broker rejected the record: INVALID_RECORD")

func TestRejectedRowRetriesWithGrowingDelayThenFails(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.send.Answer("1", errRejected, errRejected, errRejected, errRejected)
		rows := b.append(t, 1, 2)
		r := b.relay(t, "a")

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Claimed: 2, Sent: 1, Retried: 1}, res)
		require.Equal(t, []int64{rows[1].ID}, b.send.SentIDs(), "the other message is unaffected")

		var delays []time.Duration
		for attempt := 2; attempt <= 4; attempt++ {
			m := b.row(t, rows[0].ID)
			require.Equal(t, outbox.StatusRetry, m.Status)
			require.Equal(t, attempt-1, m.RetryCount)
			require.Contains(t, *m.LastError, "INVALID_RECORD")
			delay := m.NextAttemptAt.Sub(b.clock.Now())
			delays = append(delays, delay)
			// Not due before its time.
			res, err = r.RunOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, res.Claimed)
			b.clock.Add(delay)
			res, err = r.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Claimed)
		}
		for i := 1; i < len(delays); i++ {
			require.Greater(t, delays[i], delays[i-1], "retry delays grow: %v", delays)
		}
		require.Equal(t, 1, res.Failed)
		m := b.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusFail, m.Status, "FAIL after 1 + 3 attempts")
		require.Equal(t, 4, m.RetryCount)
		require.Contains(t, *m.LastError, "INVALID_RECORD")

		// FAIL is kept; nothing more is attempted.
		b.clock.Add(time.Hour)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed)
	})
}

func TestUnreachableBrokerSpendsNoRetries(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 2, 1)
		r := b.relay(t, "a")
		b.send.SetDown(unreachable)
		for range 10 {
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			require.True(t, res.Unavailable)
			require.Equal(t, 2, res.Released)
			b.clock.Add(time.Minute)
		}
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusPending, got.Status)
			require.Zero(t, got.RetryCount)
		}
		b.send.SetDown(nil)
		for range 2 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
		}
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
	})
}

func TestCrashBetweenClaimAndSendIsRecovered(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		rows := b.append(t, 1, 2, 3)
		dying := b.relay(t, "dying")
		ctx, cancel := context.WithCancel(context.Background())
		dying.afterClaim = cancel
		res, err := dying.RunOnce(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 3, res.Claimed)
		require.Empty(t, b.send.SentIDs(), "nothing was sent")
		for _, m := range rows {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status)
		}

		other := b.relay(t, "other")
		res, err = other.RunOnce(context.Background())
		require.NoError(t, err)
		require.Zero(t, res.Claimed, "claims are respected before the stale limit")

		b.clock.Add(time.Minute + time.Second)
		res, err = other.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 3, res.Recovered)
		b.clock.Add(2 * time.Second) // past the recovered rows' retry delay
		res, err = other.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 3, res.Sent)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Equal(t, 1, got.RetryCount, "the recovery counted as an attempt")
			require.Equal(t, "other", *got.ClaimedBy)
		}
	})
}

// A relay that hangs in Send past the stale limit: another instance
// recovers and sends its rows; the hung relay's late acknowledgement is refused.
func TestLateWriteOfRecoveredClaimIsFenced(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		rows := b.append(t, 1, 2)
		hungSend := relaytest.NewSender()
		release := hungSend.Hold()
		hung, err := New(b.store, hungSend, Config{InstanceID: "hung", Interval: 20 * time.Millisecond,
			StaleAfter: time.Minute, RetryBase: time.Second, Now: b.clock.Now})
		require.NoError(t, err)

		type out struct {
			res Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := hung.RunOnce(context.Background())
			done <- out{res, err}
		}()
		require.Eventually(t, func() bool { return hungSend.Calls() == 1 }, 10*time.Second, 5*time.Millisecond)

		b.clock.Add(2 * time.Minute)
		live := b.relay(t, "live")
		res, err := live.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, res.Recovered)
		b.clock.Add(2 * time.Second)
		res, err = live.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, res.Sent)

		release()
		late := <-done
		require.NoError(t, late.err)
		require.Equal(t, 2, late.res.Fenced)
		require.Zero(t, late.res.Sent)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Equal(t, "live", *got.ClaimedBy)
		}
	})
}

func TestLaterEventOfAPostWaitsForTheFailingOne(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.send.Answer("5", errRejected, errRejected)
		rows := b.append(t, 5, 5, 6)
		r := b.relay(t, "a")
		for range 6 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
			if got := b.row(t, rows[1].ID); got.Status == outbox.StatusSent {
				break
			}
			require.Equal(t, outbox.StatusPending, b.row(t, rows[1].ID).Status, "the second event waits")
			b.clock.Add(time.Minute)
		}
		require.Equal(t, []int64{rows[2].ID, rows[0].ID, rows[1].ID}, b.send.SentIDs(),
			"post 6 was not held up; post 5's events went in order")
	})
}

// A full batch leaves its SENT write to the next poll, which makes it in the
// transaction of its claim; the rows stay PROCESSING until then.
func TestFullBatchDefersSentToTheNextClaim(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks() // SQLite writes them at once unless told
		rows := b.append(t, 1, 2, 1)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs())
		require.Equal(t, Result{Claimed: 2, Deferred: 2}, res)
		for _, m := range rows[:2] {
			require.Equal(t, outbox.StatusProcessing, b.row(t, m.ID).Status, "SENT is deferred")
		}

		// The next poll writes them and, in the same transaction, sees that
		// post 1's second event is now its head.
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 3, Claimed: 1}, res, "the two deferred and the one of this batch, not full, so recorded at once")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.NotNil(t, got.SentAt)
		}
		res, err = r.Flush(ctx)
		require.NoError(t, err)
		require.Zero(t, res, "nothing left to flush")
	})
}

// Flush writes what a full batch deferred; a deferred write whose claim was
// recovered meanwhile is refused like any late write.
func TestFlushRecordsDeferredAndIsFenced(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks() // SQLite writes them at once unless told
		rows := b.append(t, 1, 2)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Deferred)
		res, err = r.Flush(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Sent: 2}, res)
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status)
		}

		// Deferred past the stale limit: another instance recovers the
		// rows; the late write of the first claim is fenced.
		more := b.append(t, 3, 4)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Deferred)
		b.clock.Add(2 * time.Minute)
		rec, err := b.store.RecoverStale(ctx, b.clock.Now().Add(-time.Minute), 3, b.clock.Now())
		require.NoError(t, err)
		require.Equal(t, 2, rec.Retried)
		res, err = r.Flush(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{Fenced: 2}, res)
		for _, m := range more {
			require.Equal(t, outbox.StatusRetry, b.row(t, m.ID).Status)
		}
	})
}

// Acknowledgements deferred across a long pause (a database outage longer
// than the stale limit) are written before this relay looks for stale
// claims, so it does not recover, fence and resend its own acknowledged rows.
func TestDeferredAcknowledgementsAreNotRecoveredAsStale(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks()
		rows := b.append(t, 1, 2)
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 2 })
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Deferred)

		b.clock.Add(r.Config().StaleAfter + time.Minute)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Recovered, "its own acknowledged rows were recovered as stale")
		require.Zero(t, res.Fenced)
		for _, m := range rows {
			got := b.row(t, m.ID)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Zero(t, got.RetryCount)
		}
		require.Equal(t, []int64{rows[0].ID, rows[1].ID}, b.send.SentIDs(), "sent once each")
	})
}

// Stop during a full batch's send: the loop ends after that poll and writes
// the acknowledgements it deferred before Stop returns.
func TestStopRecordsDeferredAcknowledgements(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		b.store = b.store.WithDeferredAcks()
		// Rows written a second ago, so all three are due on the relay's real clock.
		b.clock = clocktest.New(time.Now().Add(-time.Second))
		rows := b.append(t, 1, 2, 3)
		release := b.send.Hold()
		r := b.relay(t, "a", func(c *Config) { c.BatchSize = 3; c.Now = time.Now })
		require.NoError(t, r.Start(context.Background()))
		require.Eventually(t, func() bool { return b.send.Calls() == 1 }, 10*time.Second, 5*time.Millisecond)

		stopped := make(chan struct{})
		go func() { r.Stop(); close(stopped) }()
		require.Eventually(t, r.Stopping, 10*time.Second, time.Millisecond)
		release() // the send completes after Stop was asked
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Fatal("Stop did not return")
		}
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, b.row(t, m.ID).Status, "recorded before Stop returned")
		}
		require.Equal(t, 1, b.send.Calls(), "no poll after Stop")
	})
}

// Back-to-back polls look for stale claims once per interval, not each time.
func TestStaleClaimsAreLookedForOncePerInterval(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		r := b.relay(t, "a", func(c *Config) { c.Interval = time.Second; c.StaleAfter = time.Minute })
		rows := b.append(t, 1, 2)
		dead, err := b.store.Claim(ctx, "dead", 10, b.clock.Now())
		require.NoError(t, err)
		require.Len(t, dead, 2)

		b.clock.Add(time.Minute - 500*time.Millisecond)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{}, res, "not stale yet")
		b.clock.Add(600 * time.Millisecond) // stale now, but looked 0.6s ago
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, Result{}, res, "within the interval of the last look")
		b.clock.Add(400 * time.Millisecond)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Recovered)
		for _, m := range rows {
			require.Equal(t, outbox.StatusRetry, b.row(t, m.ID).Status)
		}
	})
}

// The loop sends and records every due row; Stop ends it (Stop waiting for
// a poll in flight is TestStopWaitsForThePollInFlight).
func TestStartStop(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	b := setup(t, db)
	b.clock = clocktest.New(time.Now())
	rows := b.append(t, 1, 2, 3)
	r := b.relay(t, "loop", func(c *Config) { c.Now = time.Now })
	require.True(t, returnsWithin(r.Stop, 10*time.Second), "Stop without Start")
	r2 := b.relay(t, "loop2", func(c *Config) { c.Now = time.Now })
	require.NoError(t, r2.Start(context.Background()))
	require.Error(t, r2.Start(context.Background()), "started twice")
	require.Eventually(t, func() bool {
		for _, m := range rows {
			if b.row(t, m.ID).Status != outbox.StatusSent {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
	require.True(t, returnsWithin(r2.Stop, 30*time.Second), "Stop")
	select {
	case <-r2.Done():
	default:
		t.Fatal("Stop returned before the loop exited")
	}
	require.True(t, returnsWithin(r2.Stop, 10*time.Second), "Stop twice")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{},
		{InstanceID: "x", BatchSize: 6000},
		{InstanceID: "x", MaxRetries: Retries(101)},
		{InstanceID: "x", Interval: time.Minute, StaleAfter: time.Minute},
		{InstanceID: "x", RetryBase: time.Minute, RetryMax: time.Second},
	} {
		_, err := New(nil, nil, c)
		require.ErrorContains(t, err, "invalid relay config", "%+v", c)
	}
}

// While the broker is down the relay backs off, but with a sender it can
// ping it polls again within an interval of the broker's return, not at the
// end of a backoff that has grown to seconds.
func TestOutageEndsAtTheFirstSuccessfulPing(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	b := setup(t, db)
	b.send.SetDown(unreachable)
	b.clock = clocktest.New(time.Now().Add(-time.Second))
	rows := b.append(t, 1, 2)
	var unavailable atomic.Int64
	r, err := New(b.store, b.send.Pinging(), Config{InstanceID: "a", Interval: 20 * time.Millisecond,
		StaleAfter: time.Minute, OutageBackoffMax: time.Minute, Logger: slog.New(slog.DiscardHandler),
		Observe: func(res Result, _ time.Duration, _ error) {
			if res.Unavailable {
				unavailable.Add(1)
			}
		}})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	// Eight polls in, the backoff is 20ms * 2^7 = 2.56s.
	require.Eventually(t, func() bool { return unavailable.Load() >= 8 }, 30*time.Second, 5*time.Millisecond)
	b.send.SetDown(nil)
	back := time.Now()
	require.Eventually(t, func() bool {
		return b.row(t, rows[0].ID).Status == outbox.StatusSent && b.row(t, rows[1].ID).Status == outbox.StatusSent
	}, time.Second, 5*time.Millisecond, "the relay waited for its backoff instead of pinging")
	t.Logf("sent %s after the broker came back", time.Since(back).Round(time.Millisecond))
}
