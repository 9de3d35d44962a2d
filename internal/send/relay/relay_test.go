package relay

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
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
	return b.relayVia(t, b.send, id, mutate...)
}

// relayVia is relay sending through send instead of the bundle's sender
// (a relay that hangs or dies on its own while the others go on).
func (b *bundle) relayVia(t *testing.T, send Sender, id string, mutate ...func(*Config)) *Relay {
	t.Helper()
	// MaxBatchSize 1: the batch stays the one a test sets (batch_test.go
	// covers its growth).
	cfg := Config{InstanceID: id, Interval: 20 * time.Millisecond, BatchSize: 100, MaxBatchSize: 1, StaleAfter: time.Minute,
		RetryBase: time.Second, RetryMax: time.Minute, Now: b.clock.Now}
	for _, m := range mutate {
		m(&cfg)
	}
	r, err := New(b.store, send, cfg)
	require.NoError(t, err)
	return r
}

func (b *bundle) append(t *testing.T, postIDs ...int64) []outbox.Message {
	t.Helper()
	var out []outbox.Message
	for _, id := range postIDs {
		out = append(out, appendEvent(t, b.db.DB, id, b.clock.Now()))
		b.clock.Add(time.Millisecond)
	}
	return out
}

// appendEvent appends an event of post written at at (an instance's clock,
// the bundle's or the real one).
func appendEvent(t *testing.T, db *gorm.DB, post int64, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.Append(db, reservationtest.Outbox(t, event.PostingEvent, post, at, nil))
	require.NoError(t, err)
	return *m
}

// leaveDeadClaim makes row id PROCESSING under a claim of the instance
// "dead" taken at claimedAt, with retries spent.
func leaveDeadClaim(t *testing.T, db *gorm.DB, id int64, claimedAt time.Time, retries int) {
	t.Helper()
	require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", id).Updates(map[string]any{
		"status": outbox.StatusProcessing, "claimed_by": "dead", "claimed_at": claimedAt,
		"retry_count": retries, "version": gorm.Expr("version + 1")}).Error)
}

func (b *bundle) row(t *testing.T, id int64) outbox.Message {
	t.Helper()
	var m outbox.Message
	require.NoError(t, b.db.DB.First(&m, id).Error)
	return m
}

// requireStatus checks that every row of rows is in status want.
func (b *bundle) requireStatus(t *testing.T, rows []outbox.Message, want outbox.Status, why string) {
	t.Helper()
	for _, m := range rows {
		msg := fmt.Sprintf("row %d", m.ID)
		if why != "" {
			msg += ": " + why
		}
		require.Equal(t, want, b.row(t, m.ID).Status, msg)
	}
}

// requireNoAttemptSpent checks that every row of rows is in status want
// with no retry spent.
func (b *bundle) requireNoAttemptSpent(t *testing.T, rows []outbox.Message, want outbox.Status) {
	t.Helper()
	for _, m := range rows {
		got := b.row(t, m.ID)
		require.Equal(t, want, got.Status, "row %d", m.ID)
		require.Zero(t, got.RetryCount, "row %d spent an attempt (last_error %v)", m.ID, got.LastError)
	}
}

// requireSentBy checks that every row of rows is SENT under owner's claim.
func (b *bundle) requireSentBy(t *testing.T, rows []outbox.Message, owner string) {
	t.Helper()
	for _, m := range rows {
		got := b.row(t, m.ID)
		require.Equal(t, outbox.StatusSent, got.Status, "row %d", m.ID)
		require.Equal(t, owner, *got.ClaimedBy, "row %d", m.ID)
	}
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
		b.requireNoAttemptSpent(t, rows, outbox.StatusPending)
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
		dying.testHooks().afterClaim = cancel
		res, err := dying.RunOnce(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 3, res.Claimed)
		require.Empty(t, b.send.SentIDs(), "nothing was sent")
		b.requireStatus(t, rows, outbox.StatusProcessing, "")

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
			require.Equal(t, other.Owner(), *got.ClaimedBy)
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
		hung := b.relayVia(t, hungSend, "hung")

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
		b.requireSentBy(t, rows, live.Owner())
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
		b.requireStatus(t, rows[:2], outbox.StatusProcessing, "SENT is deferred")

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
		b.requireStatus(t, rows, outbox.StatusSent, "")

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
		b.requireStatus(t, more, outbox.StatusRetry, "")
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
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
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
		requireWithin(t, stopped, 30*time.Second, "Stop did not return")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID}, b.send.SentIDs())
		b.requireStatus(t, rows, outbox.StatusSent, "recorded before Stop returned")
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
		b.requireStatus(t, rows, outbox.StatusRetry, "")
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
	requireLoopExited(t, r2)
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
		{InstanceID: strings.Repeat("x", MaxInstanceIDLen+1)},
	} {
		_, err := New(nil, nil, c)
		require.ErrorContains(t, err, "invalid relay config", "%+v", c)
	}
}

// TestConfigValidationNamesTheFirstSettingOut: with RetryBase (or RetryMax)
// and OutageBackoffMax all out of their limits, the refusal names the
// retry setting, the first of them in the Config, as it did before the
// retry check moved into backoff.CheckRetry.
func TestConfigValidationNamesTheFirstSettingOut(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.InstanceID, c.RetryBase, c.OutageBackoffMax = "x", -time.Second, time.Second
	require.ErrorContains(t, c.Validate(), "relay.Config.RetryBase ")
	c.RetryBase, c.RetryMax = time.Second, time.Millisecond
	require.ErrorContains(t, c.Validate(), "relay.Config.RetryMax ")
}

// An interval longer than the outage backoff's default cap raises the cap
// to the interval instead of refusing a field the operator cannot set; a
// cap given below the interval is still refused.
func TestLongIntervalRaisesTheOutageBackoffCap(t *testing.T) {
	t.Parallel()
	r, err := New(outbox.NewStore(databasetest.NewSQLite(t)), relaytest.NewSender(),
		Config{InstanceID: "a", Interval: time.Minute, StaleAfter: 5 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, time.Minute, r.Config().OutageBackoffMax)
	_, err = New(outbox.NewStore(databasetest.NewSQLite(t)), relaytest.NewSender(),
		Config{InstanceID: "a", Interval: time.Minute, StaleAfter: 5 * time.Minute, OutageBackoffMax: 30 * time.Second})
	require.ErrorContains(t, err, "OutageBackoffMax")
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

// Commits wake the local relay (its interval here is an hour, so only a
// wake can make it poll); a storm of commits while it is busy sending is
// folded into a few polls, and neither the storm nor commits after Stop
// ever wait for the relay.
func TestCommitWakesAreCoalescedAndNeverBlockTheWriter(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		send := relaytest.NewSender()
		r, err := New(outbox.NewStore(db), send, Config{InstanceID: "a", Interval: time.Hour,
			OutageBackoffMax: time.Hour, StaleAfter: 3 * time.Hour})
		require.NoError(t, err)
		writers := database.WithCommitWaker(db.DB, r.Wake)
		appendPost := func(post int64) error {
			return database.Transaction(ctx, writers, func(tx *gorm.DB) error {
				_, err := outbox.Append(tx, reservationtest.Outbox(t, event.PostingEvent, post, time.Now(), nil))
				return err
			})
		}
		sent := func() int64 { return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] }

		r.Wake() // before Start: kept, harmless
		require.NoError(t, r.Start(ctx))
		t.Cleanup(r.Stop)

		require.NoError(t, appendPost(1))
		require.Eventually(t, func() bool { return sent() == 1 }, 30*time.Second, 5*time.Millisecond, "a commit wakes the relay")

		// The relay is stuck in a send; 1,000 commits from 4 writers go on.
		release := send.Hold()
		require.NoError(t, appendPost(2))
		<-send.Entered()
		calls := send.Calls()
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 250 {
					errs <- appendPost(int64(100 + w*250 + i))
				}
			}()
		}
		stormed := make(chan struct{})
		go func() { wg.Wait(); close(stormed) }()
		select {
		case <-stormed:
		case <-time.After(time.Minute):
			release()
			t.Fatal("writers waited for the relay stuck in its send")
		}
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		release()
		require.Eventually(t, func() bool { return sent() == 1002 }, time.Minute, 10*time.Millisecond)
		// 1,000 rows are 10 full batches; wakes add a few polls, not one each.
		require.Less(t, send.Calls()-calls, 30, "wakes not coalesced")

		r.Stop()
		done := make(chan error, 1)
		go func() {
			r.Wake()
			done <- appendPost(3)
		}()
		require.NoError(t, requireWithin(t, done, 30*time.Second, "a commit after Stop waited for the relay"))
	})
}

// A pipelined poll writes the results of the batch it sent only once the
// claim of the next batch, run beside the send, has returned. When that
// claim hangs on the database (here: a row lock on a deferred
// acknowledgement it writes; in production a lock wait, a dropped
// connection that has not timed out yet), the batch already sent stays
// PROCESSING for as long, past the stale limit, and another instance would
// recover it and send it a second time with a retry spent. The claim of a
// batch that would be released unsent anyway once older than a tenth of
// StaleAfter must not be waited for longer than that.
func TestSlowNextClaimDoesNotHoldTheSentBatch(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		if db.Dialect == database.SQLite {
			t.Skip("SQLite's one write lock holds the batch's own write as well; the row lock is MySQL's and PostgreSQL's")
		}
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 6, 1)
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 2; c.StaleAfter = 2 * time.Second })

		// Rows 1,2 sent (their SENT deferred to the next claim), rows 3,4
		// claimed for the next poll.
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, res.Claimed)
		require.Equal(t, 2, res.Deferred)

		// The next claim writes rows 1,2's SENT first: it waits for this lock.
		release := holdWrites(t, db, rows[0].ID)
		done := make(chan error, 1)
		go func() { _, err := r.Pump(ctx); done <- err }()
		var pumpErr error
		select {
		case pumpErr = <-done:
		case <-time.After(10 * r.Config().StaleAfter):
			release()
			<-done
			t.Fatalf("the poll that sent rows 3,4 waited %s for the next claim: past the stale limit %s",
				10*r.Config().StaleAfter, r.Config().StaleAfter)
		}
		require.ErrorContains(t, pumpErr, "claim the next batch")
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID}, b.send.SentIDs())
		release()

		// What the timed-out claim left is written by the next polls; each
		// event goes out once, no retry spent.
		pumpUntilIdle(t, ctx, r, 10)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: 6}, relaytest.CountByStatus(t, db.DB))
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
	})
}

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
			ids = append(ids, appendEvent(t, db.DB, p, time.Now()).ID)
		}
		// A claim left by a dead instance, out of retries: recovery makes it FAIL.
		dead := appendEvent(t, db.DB, 99, time.Now())
		leaveDeadClaim(t, db.DB, dead.ID, time.Now().Add(-time.Hour), 3)

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
		requireWithin(t, send.Entered(), 30*time.Second, "a never sent")
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
		var rows []outbox.Message
		require.NoError(t, db.DB.Order("id").Find(&rows, ids).Error)
		require.Len(t, rows, len(ids))
		requireSentOnceEach(t, rows, send)
	})
}

// Four relays running their pipelined loops on one backlog, with the broker
// rejecting the first attempt of every third event (RETRY, due again after
// a short backoff) and wakes arriving all the while, send every event once
// and keep per-post order: no later event of a post overtakes one waiting
// to be retried, whichever relay claimed it and whichever batch (the one
// in the air or the one claimed beside it) held it.
func TestPipelinedRelaysKeepPerPostOrderAcrossRejections(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		rows := b.appendRounds(t, 40, 5)
		b.send.SetPause(time.Millisecond)
		attempts := map[int64]int{} // read and written under the sender's lock
		b.send.Reject(func(m event.Message) error {
			id := m.Sequence()
			attempts[id]++
			if id%3 == 0 && attempts[id] == 1 {
				return errRejected
			}
			return nil
		})
		var relays []*Relay
		for i := range 4 {
			r, err := New(outbox.NewStore(db), b.send, Config{InstanceID: "r" + string(rune('a'+i)),
				Interval: 20 * time.Millisecond, BatchSize: 7, StaleAfter: time.Minute,
				RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
			require.NoError(t, err)
			relays = append(relays, r)
		}
		startAll(t, relays)
		require.Eventually(t, func() bool {
			for _, r := range relays {
				r.Wake()
			}
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, 2*time.Minute, 10*time.Millisecond)
		for _, r := range relays {
			r.Stop()
		}
		requireOrderedOnce(t, rows, b.send.SentIDs())
		for _, m := range rows {
			want := 0
			if m.ID%3 == 0 {
				want = 1
			}
			require.Equal(t, want, b.row(t, m.ID).RetryCount, "row %d", m.ID)
		}
	})
}

// requireWithin waits at most d for ch to deliver a value (or close) and
// returns it; the test fails when nothing came.
func requireWithin[T any](t *testing.T, ch <-chan T, d time.Duration, msgAndArgs ...any) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		require.FailNow(t, fmt.Sprintf("nothing within %s", d), msgAndArgs...)
		var none T
		return none
	}
}

// requireLoopExited checks, right after Stop returned, that r's loop has
// exited.
func requireLoopExited(t *testing.T, r *Relay) {
	t.Helper()
	select {
	case <-r.Done():
	default:
		t.Fatal("Stop returned before the loop exited")
	}
}

// startAll starts every relay, each stopped when the test ends.
func startAll(t *testing.T, relays []*Relay) {
	t.Helper()
	for _, r := range relays {
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
	}
}

// returnsWithin runs f in a goroutine and reports whether it returned
// within d. It leaves f running when it did not.
func returnsWithin(f func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop waits for the loop: with a poll's send in flight, neither of two
// concurrent Stop calls returns until that send finished and its results
// were recorded (rows SENT, the poll observed); by then the loop has
// exited. Stop without Start, and Stop again, return at
// once; a stopped relay does not start again.
func TestStopWaitsForThePollInFlight(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)

		idle := b.relay(t, "idle", func(c *Config) { c.Now = time.Now })
		require.True(t, returnsWithin(idle.Stop, 10*time.Second), "Stop without Start")
		require.True(t, returnsWithin(idle.Stop, 10*time.Second), "Stop twice without Start")
		require.Error(t, idle.Start(context.Background()), "a stopped relay does not start")

		// Rows written a second ago, so they are due on the relay's real clock.
		b.clock = clocktest.New(time.Now().Add(-time.Second))
		rows := b.append(t, 1, 2, 3)
		release := b.send.Hold()
		var mu sync.Mutex
		var polls []Result
		var errs []error
		r := b.relay(t, "a", func(c *Config) {
			c.Now = time.Now
			c.Logger = slog.New(slog.DiscardHandler)
			c.BatchSize = 10
			c.Observe = func(res Result, _ time.Duration, err error) {
				mu.Lock()
				defer mu.Unlock()
				polls = append(polls, res)
				if err != nil {
					errs = append(errs, err)
				}
			}
		})
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(func() {
			release()
			r.Stop()
		})
		require.Eventually(t, func() bool { return b.send.Calls() == 1 }, 10*time.Second, 5*time.Millisecond)

		stops := make(chan struct{}, 2)
		for range 2 {
			go func() { r.Stop(); stops <- struct{}{} }()
		}
		// Both calls are in Stop, and the send is still in flight.
		require.Eventually(t, r.Stopping, 10*time.Second, time.Millisecond)
		select {
		case <-stops:
			t.Fatal("Stop returned while a poll's send was in flight")
		case <-time.After(200 * time.Millisecond):
		}
		b.requireStatus(t, rows, outbox.StatusProcessing, "the send has not finished")

		release()
		for i := range 2 {
			requireWithin(t, stops, 30*time.Second, "Stop call %d did not return after the send finished", i+1)
		}
		// Stop returned: the poll was recorded and observed, the loop is gone.
		b.requireStatus(t, rows, outbox.StatusSent, "recorded before Stop returned")
		mu.Lock()
		// The poll in flight, observed before Stop returned; where its
		// acknowledgements were left to the next poll's claim, the loop's
		// last write, observed too.
		want := []Result{{Claimed: 3, Sent: 3}}
		if b.store.DefersAcksToNextClaim() {
			want = []Result{{Claimed: 3, Deferred: 3}, {Sent: 3}}
		}
		require.Equal(t, want, polls, "what the loop observed before Stop returned")
		require.Empty(t, errs)
		mu.Unlock()
		requireLoopExited(t, r)
		require.True(t, returnsWithin(r.Stop, 10*time.Second), "Stop after Stop")
		require.Error(t, r.Start(context.Background()), "a stopped relay does not start again")
		require.Equal(t, 1, b.send.Calls(), "no poll after Stop")
	})
}

// A send that ended without an answer keeps its row PROCESSING, holding the
// post's next event, until the sender says the request can no longer land;
// then the row goes back (no attempt spent) and is sent, before the post's
// next event. A plain unavailable answer (nothing written) releases at once.
func TestUnansweredSendHoldsItsRowUntilSettled(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.append(t, 1, 1, 2)
		settled := make(chan struct{})
		b.send.Answer(strconv.FormatInt(1, 10), &UnansweredError{Err: unreachable, Settled: settled})
		b.send.Answer(strconv.FormatInt(2, 10), unreachable)
		r := b.relay(t, "a")
		other := b.relay(t, "b")

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Held)
		require.Equal(t, 1, res.Released)
		require.Equal(t, outbox.StatusProcessing, b.row(t, rows[0].ID).Status, "released while its request may land")
		require.Equal(t, outbox.StatusPending, b.row(t, rows[2].ID).Status, "nothing written: released at once")

		// Meanwhile no relay sends the post's events; the other post's go.
		res, err = other.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Sent)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed+res.Released)
		require.Equal(t, outbox.StatusProcessing, b.row(t, rows[0].ID).Status)

		close(settled)
		for range 3 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
			b.clock.Add(time.Millisecond)
		}
		_, err = r.Flush(ctx)
		require.NoError(t, err)
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
		require.Equal(t, []int64{rows[2].ID, rows[0].ID, rows[1].ID},
			b.send.SentIDs(), "acknowledged: the held row, sent again, before the post's next event")
	})
}

// Two relays whose clocks are minutes apart share the database's clock for
// claims, retries and stale recovery: neither takes the other's live claims
// for stale, so every event is sent once and no retry is spent. (With each
// relay's own clock, the one 3 minutes ahead recovered the other's claims
// while they were being sent.)
func TestRelaysWithSkewedClocksSendEachEventOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		const posts, perPost = 60, 5
		var ids []int64
		for range perPost {
			for p := int64(1); p <= posts; p++ {
				ids = append(ids, appendEvent(t, db.DB, p, time.Now()).ID)
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
		startAll(t, relays)
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
		requireSentOnceEach(t, rows, send)
	})
}

// requireSentOnceEach checks that every row (as read back) is SENT with no
// retry spent and went to send exactly once.
func requireSentOnceEach(t *testing.T, rows []outbox.Message, send *relaytest.Sender) {
	t.Helper()
	for _, m := range rows {
		require.Equal(t, outbox.StatusSent, m.Status, "row %d", m.ID)
		require.Zero(t, m.RetryCount, "row %d spent a retry (last_error %v)", m.ID, m.LastError)
		require.Equal(t, 1, send.Sends(m.EventID), "row %d sends", m.ID)
	}
}

// An event written by an instance whose clock runs 10 minutes ahead does not
// wait those 10 minutes, nor hold its post's later events.
func TestEventFromAnInstanceAheadIsDueAtOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		first := appendEvent(t, db.DB, 7, time.Now().Add(10*time.Minute))
		second := appendEvent(t, db.DB, 7, time.Now())
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
		failed := failWriteOnce(t, db, outbox.StatusSent)
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
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
	})
}

// failWriteOnce fails the first write of status (SENT, or RETRY for a
// rejection) through db as a lost connection would; the returned flag
// tells whether it has.
func failWriteOnce(t *testing.T, db *database.DB, status outbox.Status) *atomic.Bool {
	t.Helper()
	var failed atomic.Bool
	databasetest.Fail(t, db.DB, databasetest.StmtUpdate, driver.ErrBadConn, func(tx *gorm.DB) bool {
		m, ok := tx.Statement.Dest.(map[string]any)
		return ok && m["status"] == status && failed.CompareAndSwap(false, true)
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
		failed := failWriteOnce(t, db, outbox.StatusSent)
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

	// ValidateFor says the same before the sender exists (serve checks
	// its settings before it opens anything).
	valid := func(staleAfter, interval, writeTimeout time.Duration) Config {
		c := DefaultConfig()
		c.InstanceID, c.StaleAfter, c.Interval, c.WriteTimeout = "a", staleAfter, interval, writeTimeout
		return c
	}
	require.ErrorAs(t, valid(11*time.Second, time.Second, 30*time.Second).ValidateFor(30*time.Second), &sl)
	require.Equal(t, 75*time.Second, sl.Min)
	require.NoError(t, valid(20*time.Second, time.Second, 5*time.Second).ValidateFor(10*time.Second))
	require.NoError(t, valid(2*time.Second, 100*time.Millisecond, 30*time.Second).ValidateFor(0))
	require.Error(t, Config{InstanceID: "a", StaleAfter: 20 * time.Second}.ValidateFor(0), "no default is filled in: a zero batch size is refused")
}

// While the broker cannot be reached the pause between polls doubles from
// the interval up to OutageBackoffMax, so an outage does not turn into a
// poll every interval (and a write transaction each) against a dead broker.
func TestOutageBackoffDoubles(t *testing.T) {
	t.Parallel()
	b := setup(t, databasetest.NewSQLite(t))
	b.send.SetDown(unreachable)
	b.append(t, 1)
	var (
		mu    sync.Mutex
		polls []time.Time
	)
	r, err := New(b.store, b.send, Config{InstanceID: "a", Interval: 20 * time.Millisecond,
		StaleAfter: time.Minute, OutageBackoffMax: time.Second, Logger: slog.New(slog.DiscardHandler),
		Observe: func(res Result, _ time.Duration, _ error) {
			if res.Unavailable {
				mu.Lock()
				polls = append(polls, time.Now())
				mu.Unlock()
			}
		}})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(polls) >= 7 }, 30*time.Second, 5*time.Millisecond)
	r.Stop()
	mu.Lock()
	defer mu.Unlock()
	var gaps []time.Duration
	for i := 1; i < 7; i++ {
		gaps = append(gaps, polls[i].Sub(polls[i-1]))
	}
	t.Logf("pauses between unavailable polls: %v", gaps)
	// Expected 20, 40, 80, 160, 320, 640 ms (the last capped at 1 s); a
	// loaded machine only makes pauses longer, so check the floor of the
	// last ones and that they grew.
	require.GreaterOrEqual(t, gaps[5], 600*time.Millisecond, "the sixth pause is 20ms * 2^5")
	require.GreaterOrEqual(t, gaps[4], 300*time.Millisecond, "the fifth pause is 20ms * 2^4")
	require.Less(t, gaps[0], gaps[5]/2, "the pauses grew")
}

// A database outage longer than the stale limit does not make the relays
// take each other's claims for dead: a relay that saw the database fail
// holds stale recovery until the database has answered for a stale limit,
// so the relay that kept its acknowledgements through the outage writes
// them before any peer recovers and resends its rows.
func TestPeerDoesNotRecoverKeptAcknowledgementsAfterALongOutage(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		s := setup(t, db)
		row := s.append(t, 1)[0]
		down := databasetest.Outage(t, db.DB, databasetest.StmtUpdate) // the relay's host lost its network
		broker := s.send
		broker.BeforeNextSend(func() { down.Store(true) }) // a's send: the database is cut off after a's claim
		a, b := s.relay(t, "a"), s.relay(t, "b")

		_, err := a.RunOnce(ctx) // claimed, acknowledged, SENT write failed: kept
		require.Error(t, err)
		s.clock.Add(2 * time.Minute) // the outage outlasts the stale limit
		_, err = b.RunOnce(ctx)      // b polls during the outage too, and fails
		require.Error(t, err)
		down.Store(false)
		for range 3 {
			_, err := b.RunOnce(ctx)
			require.NoError(t, err)
			_, _ = a.RunOnce(ctx)
			s.clock.Add(2 * time.Second)
		}
		got := s.row(t, row.ID)
		require.Equal(t, outbox.StatusSent, got.Status)
		require.Zero(t, got.RetryCount, "a retry spent by a peer's recovery")
		require.Equal(t, 1, broker.Sends(row.EventID), "sent twice")

		// Once the database has answered for a stale limit, recovery is back.
		dead := s.append(t, 2)[0]
		leaveDeadClaim(t, db.DB, dead.ID, s.clock.Now().Add(-time.Hour), 0)
		s.clock.Add(time.Minute)
		res, err := b.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Recovered)
	})
}

// A relay cut off from the broker and the database at once (its host's
// network fails) cannot hand its claimed rows back. When the network returns
// it must hand them back itself, with no attempt spent, rather than leave
// them PROCESSING until stale recovery spends one of their retries and holds
// their posts for the whole stale limit: an outage is not the rows' fault.
func TestUnreachableBrokerAndFailedReleaseSpendNoRetry(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		row := b.append(t, 1)[0]

		broker := b.send
		broker.SetDown(unreachable)
		dbDown := databasetest.Outage(t, db.DB, databasetest.StmtUpdate)
		// The database is cut off once the rows are claimed, before the send,
		// like a host losing its network mid-poll.
		broker.BeforeNextSend(func() { dbDown.Store(true) })
		r := b.relay(t, "a")

		// Claimed, then broker and database unreachable: the release fails.
		res, err := r.RunOnce(ctx)
		require.Error(t, err)
		require.Equal(t, 1, res.Claimed)

		// The network returns, and the broker with it, within the stale limit.
		dbDown.Store(false)
		broker.SetDown(nil)
		for range 3 {
			b.clock.Add(30 * time.Second) // past the stale limit by the second poll
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
		}
		require.NoError(t, func() error { _, err := r.Flush(ctx); return err }())

		got := b.row(t, row.ID)
		require.Equal(t, outbox.StatusSent, got.Status)
		require.Zero(t, got.RetryCount, "an outage spent a retry (last_error %v)", got.LastError)
		require.Equal(t, 1, broker.Sends(row.EventID))
	})
}

// The database restarts while a batch claimed for the next poll waits:
// the polls during the restart fail, and so does the flush that would hand
// the batch back. Once the database answers again the relay hands it back
// itself (no attempt spent, no wait for the stale limit), and every event
// goes out once, in per-post order.
func TestDatabaseRestartWhileTheNextBatchWaits(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		down := databasetest.Outage(t, db.DB, databasetest.StmtQuery|databasetest.StmtRow|databasetest.StmtExec|databasetest.StmtUpdate) // restarting
		// The database's own clock: a poll begins by reading it.
		r, err := New(outbox.NewStore(db), b.send, Config{InstanceID: "a", Interval: 20 * time.Millisecond,
			BatchSize: 4, StaleAfter: time.Minute})
		require.NoError(t, err)

		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Claimed, "posts 1..4's first events sent, posts 5..8's claimed for the next poll")
		require.True(t, r.hasNext())
		sentBefore := len(b.send.SentIDs())

		down.Store(true)
		_, err = r.Pump(ctx)
		require.Error(t, err)
		_, err = r.Flush(ctx)
		require.Error(t, err)
		require.Equal(t, sentBefore, len(b.send.SentIDs()), "nothing sent while the database is away")
		down.Store(false)

		pumpUntilIdle(t, ctx, r, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))
		b.requireNoAttemptSpent(t, rows, outbox.StatusSent)
	})
}

// appendRounds appends rounds events for each of posts 1..posts, round by
// round (every post's first event, then every post's second, ...).
func (b *bundle) appendRounds(t *testing.T, posts, rounds int) []outbox.Message {
	t.Helper()
	var ids []int64
	for range rounds {
		for p := 1; p <= posts; p++ {
			ids = append(ids, int64(p))
		}
	}
	return b.append(t, ids...)
}

// processing returns the ids of the PROCESSING rows, in id order.
func (b *bundle) processing(t *testing.T) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, b.db.Model(&outbox.Message{}).Where("status = ?", outbox.StatusProcessing).Order("id").Pluck("id", &ids).Error)
	return ids
}

// pumpUntilIdle polls r as its loop does (Pump) until a poll claims, sends,
// defers and releases nothing, at most max times, then flushes.
func pumpUntilIdle(t *testing.T, ctx context.Context, r *Relay, max int) {
	t.Helper()
	for range max {
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		if res.Claimed == 0 && res.Sent == 0 && res.Deferred == 0 && res.Released == 0 {
			break
		}
	}
	_, err := r.Flush(ctx)
	require.NoError(t, err)
}

// requireOrderedOnce checks that ids (in the order acknowledged) hold every
// row of rows exactly once and, per post, in outbox order.
func requireOrderedOnce(t *testing.T, rows []outbox.Message, ids []int64) {
	t.Helper()
	post := map[int64]int64{}
	for _, m := range rows {
		post[m.ID] = m.AggregateID
	}
	seen := map[int64]bool{}
	last := map[int64]int64{}
	for _, id := range ids {
		require.False(t, seen[id], "row %d acknowledged twice", id)
		seen[id] = true
		p, ok := post[id]
		require.True(t, ok, "unknown row %d", id)
		require.Greater(t, id, last[p], "post %d: row %d after row %d", p, id, last[p])
		last[p] = id
	}
	require.Len(t, seen, len(rows), "every row acknowledged")
}

// While a full batch is being sent, Pump claims the next one, which holds
// no event of a post that has one in the air; draining with Pump keeps
// per-post order and sends each event once.
func TestPumpClaimsTheNextBatchDuringTheSend(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2) // ids: posts 1..8 first events, then their second events
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
		release := b.send.Hold()
		type out struct {
			res Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := r.Pump(ctx)
			done <- out{res, err}
		}()
		<-b.send.Entered()
		// The first batch (posts 1..4) is in the air; the next claim takes
		// posts 5..8's first events, not the second events of posts 1..4.
		want := []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID, rows[4].ID, rows[5].ID, rows[6].ID, rows[7].ID}
		require.Eventually(t, func() bool { return len(b.processing(t)) == 8 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, want, b.processing(t))
		release()
		o := <-done
		require.NoError(t, o.err)
		require.Equal(t, 8, o.res.Claimed, "this batch and the next")
		require.True(t, r.hasNext())

		pumpUntilIdle(t, ctx, r, 10)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: 16}, relaytest.CountByStatus(t, db.DB))
	})
}

// Flush hands back a batch claimed for the next poll unchanged: PENDING,
// no attempt spent.
func TestFlushReleasesTheNextBatch(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 1)
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Claimed)
		b.requireStatus(t, rows[4:], outbox.StatusProcessing, "the next batch waits, claimed")
		res, err = r.Flush(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, res.Released)
		b.requireStatus(t, rows[:4], outbox.StatusSent, "acknowledgements deferred or not, written")
		b.requireNoAttemptSpent(t, rows[4:], outbox.StatusPending)
		require.Equal(t, []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID}, b.send.SentIDs())
		require.False(t, r.hasNext())
	})
}

// An unreachable broker releases the batch sent and the one claimed
// during its send: no attempt spent on either, nothing held over the backoff.
func TestPumpOutageReleasesBothBatches(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		r := b.relay(t, "pump", func(c *Config) { c.BatchSize = 4 })
		b.send.SetDown(unreachable)
		res, err := r.Pump(ctx)
		require.NoError(t, err)
		require.True(t, res.Unavailable)
		require.Equal(t, 8, res.Released)
		require.False(t, r.hasNext())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusPending: 16}, relaytest.CountByStatus(t, db.DB))
		var retried int64
		require.NoError(t, db.Model(&outbox.Message{}).Where("retry_count > 0").Count(&retried).Error)
		require.Zero(t, retried)

		b.send.SetDown(nil)
		pumpUntilIdle(t, ctx, r, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
	})
}

// A relay that dies with two batches in the air (one being sent, one
// claimed for the next poll) loses nothing: another instance recovers
// both after the stale limit and sends every event once more, in per-post
// order; the dead relay's late acknowledgement is fenced.
func TestCrashWithTwoBatchesInFlightLosesNothing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := setup(t, db)
		rows := b.appendRounds(t, 8, 2)
		dyingSend := relaytest.NewSender()
		dying := b.relayVia(t, dyingSend, "dying", func(c *Config) { c.BatchSize = 4 })
		hang := dyingSend.Hold() // the process freezes in the send, then dies
		var wg sync.WaitGroup
		var late Result
		wg.Add(1)
		go func() {
			defer wg.Done()
			late, _ = dying.Pump(ctx)
		}()
		<-dyingSend.Entered()
		require.Eventually(t, func() bool { return len(b.processing(t)) == 8 }, 10*time.Second, 5*time.Millisecond)

		other := b.relay(t, "other", func(c *Config) { c.BatchSize = 4 })
		res, err := other.Pump(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed, "live claims are respected; the second events wait behind them")

		b.clock.Add(time.Minute + time.Second)
		res, err = other.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, res.Recovered, "both batches recovered")
		b.clock.Add(2 * time.Second)
		pumpUntilIdle(t, ctx, other, 20)
		requireOrderedOnce(t, rows, b.send.SentIDs())
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: 16}, relaytest.CountByStatus(t, db.DB))
		for _, m := range rows[:8] {
			got := b.row(t, m.ID)
			require.Equal(t, 1, got.RetryCount, "the recovery counted as an attempt")
			require.Equal(t, other.Owner(), *got.ClaimedBy)
		}

		// The frozen relay wakes up: its acknowledgement comes too late.
		hang()
		wg.Wait()
		require.Equal(t, 4, late.Fenced+late.Deferred, "the late batch is fenced (at once, or when its deferred write is tried)")
		_, _ = dying.Flush(ctx)
		b.requireSentBy(t, rows, other.Owner())
	})
}

// Four relays running their loops (pipelined polls) on one backlog send
// every event once and keep per-post order.
func TestPipelinedRelaysKeepPerPostOrder(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := setup(t, db)
		rows := b.appendRounds(t, 60, 5)
		b.send.SetPause(time.Millisecond) // sends take a while: claims overlap them
		var relays []*Relay
		for i := range 4 {
			r := b.relay(t, "r"+string(rune('a'+i)), func(c *Config) { c.BatchSize = 7 })
			relays = append(relays, r)
		}
		startAll(t, relays)
		require.Eventually(t, func() bool {
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, time.Minute, 10*time.Millisecond)
		for _, r := range relays {
			r.Stop()
		}
		requireOrderedOnce(t, rows, b.send.SentIDs())
	})
}
