package sendertest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// observer collects, over every poll of some relays, what must not happen
// in a healthy run.
type observer struct {
	mu          sync.Mutex
	errs        []string
	bad         relay.Result // Retried, Failed, Released, Recovered, RecoveredFailed, Fenced
	polls       int
	unavailable int
	claimed     map[string]int
}

func (o *observer) observe(name string) func(relay.Result, time.Duration, error) {
	return func(res relay.Result, _ time.Duration, err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if err != nil {
			o.errs = append(o.errs, fmt.Sprintf("%s: %v", name, err))
		}
		o.polls++
		if res.Unavailable {
			o.unavailable++
		}
		if o.claimed == nil {
			o.claimed = map[string]int{}
		}
		o.claimed[name] += res.Claimed
		o.bad.Retried += res.Retried
		o.bad.Failed += res.Failed
		o.bad.Released += res.Released
		o.bad.Recovered += res.Recovered
		o.bad.RecoveredFailed += res.RecoveredFailed
		o.bad.Fenced += res.Fenced
	}
}

func (o *observer) unavailablePolls() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.unavailable
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func sentCount(t testing.TB, db *gorm.DB) int64 {
	return relaytest.CountByStatus(t, db)[outbox.StatusSent]
}

func appendEvent(t *testing.T, db *gorm.DB, post int64, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.Append(db, reservationtest.Outbox(t, event.PostingEvent, post, at, map[string]any{"action": "CREATED"}))
	require.NoError(t, err)
	return *m
}

// fourRelaysDeliverEveryEventOnce runs four relays, each with its own pool
// and sender, on every dialect and through PgBouncer in transaction pooling
// (the "pgbouncer" subtest: statements of one relay land on different
// server connections): every event arrives exactly once, each post's in
// order, and no poll fails, retries, releases, recovers or fences a row.
func fourRelaysDeliverEveryEventOnce(t *testing.T, newBroker func(*testing.T) Broker) {
	for _, name := range append(databasetest.Dialects, "pgbouncer") {
		dialect := name
		if name == "pgbouncer" {
			dialect = database.PostgreSQL
		}
		t.Run(string(name), func(t *testing.T) {
			t.Parallel()
			const instances, perPost = 4, 5
			// 10,000 events on MariaDB and PostgreSQL. SQLite (a single
			// writer) is the single-process embedded mode and serializes every write
			// transaction, so four instances on one file only queue on its
			// lock: 2,000 events prove the same guarantees there, in
			// smaller batches so that each round of heads is shared out
			// (SQLite's busy handler is not fair: with batches of 50 a relay
			// sometimes got only 50 of 2,000 events, or none under load).
			// Separate pools on one database, as separate relay processes
			// hold; behind PgBouncer in transaction pooling for "pgbouncer".
			var url string
			if name == "pgbouncer" {
				url = pgbouncertest.Start(t, databasetest.PostgresURL(t, "relay"), pgbouncertest.Transaction)
			} else {
				url = databasetest.URL(t, dialect, "relay")
			}
			pools := databasetest.Pools(t, url, instances)
			posts, batch, staleAfter := 2000, 500, relay.DefaultStaleAfter
			if pools[0].Driver().SingleWriter() {
				// A pipelined relay gives up a claim of its next batch, and
				// hands back one it claimed, after a tenth of the stale
				// limit (12 s by default): under -race on a loaded machine
				// four relays queueing on one file's lock waited longer
				// (an error, or released rows). The stale limit gives
				// them a minute.
				posts, batch, staleAfter = 400, 25, 10*time.Minute
			}
			b := newBroker(t)
			rows := relaytest.Seed(t, pools[0].DB, posts, perPost, time.Now().Add(-time.Second))

			var o observer
			for i, db := range pools {
				name := fmt.Sprintf("relay-%d", i)
				r, err := relay.New(outbox.NewStore(db), b.NewSender(t, Options{}), relay.Config{
					InstanceID: name, Interval: 20 * time.Millisecond, BatchSize: batch, StaleAfter: staleAfter,
					Logger: discard(), Observe: o.observe(name),
				})
				require.NoError(t, err)
				require.NoError(t, r.Start(context.Background()))
				t.Cleanup(r.Stop) // also when an assertion below fails
			}
			require.Eventually(t, func() bool { return sentCount(t, pools[0].DB) == int64(len(rows)) },
				3*time.Minute, 50*time.Millisecond)

			require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, pools[0].DB))
			arrived := b.Read(t, len(rows), time.Minute)
			require.Len(t, arrived, len(rows), "every event exactly once")
			for _, a := range arrived {
				require.Equal(t, string(event.PostingEvent), a.EventType)
			}
			seen := RequirePostOrder(t, arrived, rows, false)
			require.Len(t, seen, len(rows))
			for eid, n := range seen {
				require.Equal(t, 1, n, "event %s delivered %d times", eid, n)
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			require.Empty(t, o.errs, "relay polls failed")
			require.Zero(t, o.unavailable, "polls that found the broker unreachable")
			require.Equal(t, relay.Result{}, o.bad, "retried, failed, released, recovered or fenced rows")
			// Where rows are locked the relays shared the work, though not
			// necessarily all four: a pipelined relay holds two batches in
			// flight, so two relays can hold every post's head, and a relay
			// that starts a moment later may find nothing to claim until
			// the end. On SQLite sharing is not promised: every write
			// waits for the file's one lock, whose busy handler is not
			// fair, and under -race on a loaded machine one relay took all
			// 2,000 events while the others waited. There the test proves
			// once and in order with four claimers contending.
			took := 0
			for name, n := range o.claimed {
				if n > 0 {
					took++
				}
				t.Logf("%s claimed %d", name, n)
			}
			if !pools[0].Driver().SingleWriter() {
				require.GreaterOrEqual(t, took, 2, "relays that claimed anything")
			}
		})
	}
}

// rejectionRetriesThenFails has the broker refuse one post: its event is
// tried four times (1 + the default 3 retries), each retry after the
// doubling, jittered delay the relay draws, then FAIL with the broker's
// reason and never tried again; the other posts' events go through once.
//
// The delay the relay chose is read as next_attempt_at minus the sent_at of
// a row acknowledged in the same poll: the relay writes both from the one
// time its poll records at (the database's time that stamped the claim,
// moved on by its monotonic clock from the claim's answer). Measured
// against the test's hand clock instead, it would include how long the
// poll took (the first one connects to the broker), and the windows of two
// retries touch (RetryBase 1s: [0.5s, 1s], then [1s, 2s]): a slow first poll
// and a low second draw made the first delay look longer than the second.
func rejectionRetriesThenFails(t *testing.T, newBroker func(*testing.T) Broker) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := newBroker(t)
		clock := clocktest.New(database.Normalize(time.Now()))
		const poison, attempts = 1, 4
		poisonKey := strconv.Itoa(poison)
		others := b.OtherKeys(poison, 5+attempts-1) // 5 at first, then one more per poll
		keysBelow(t, append(others, poison))
		bad := appendEvent(t, db.DB, poison, clock.Now())
		var good []outbox.Message
		for _, id := range others[:5] {
			good = append(good, appendEvent(t, db.DB, id, clock.Now()))
		}
		b.Reject(t, poisonKey)

		r, err := relay.New(outbox.NewStore(db).WithClock(clock.Now), b.NewSender(t, Options{}), relay.Config{InstanceID: "a",
			Interval: 20 * time.Millisecond, RetryBase: time.Second, RetryMax: time.Minute, Now: clock.Now, Logger: discard()})
		require.NoError(t, err)

		for attempt := 1; attempt <= attempts; attempt++ {
			// A row acknowledged in the same poll as the retry: its sent_at
			// is the time the poll recorded at.
			witness, claims := good[0], 1+len(good)
			if attempt > 1 {
				witness, claims = appendEvent(t, db.DB, others[5+attempt-2], clock.Now()), 2
				good = append(good, witness)
			}
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			require.False(t, res.Unavailable, "a rejection is not an outage")
			require.Equal(t, claims, res.Claimed, "attempt %d", attempt)
			if n := b.Rejections(poisonKey); n >= 0 {
				require.Equal(t, attempt, n)
			}
			var m, w outbox.Message
			require.NoError(t, db.DB.First(&m, bad.ID).Error)
			require.NoError(t, db.DB.First(&w, witness.ID).Error)
			require.Equal(t, outbox.StatusSent, w.Status)
			require.Equal(t, attempt, m.RetryCount)
			require.NotNil(t, m.LastError)
			require.Contains(t, *m.LastError, b.RejectReason())
			if attempt == attempts {
				require.Equal(t, 1, res.Failed)
				require.Equal(t, outbox.StatusFail, m.Status, "FAIL after exactly %d attempts", attempts)
				break
			}
			require.Equal(t, 1, res.Retried)
			require.Equal(t, outbox.StatusRetry, m.Status)
			// RetryBase doubled per earlier retry, jittered into [d/2, d];
			// both times are kept to the microsecond, truncated.
			d := time.Second << (attempt - 1)
			chosen := m.NextAttemptAt.Sub(*w.SentAt)
			require.GreaterOrEqual(t, chosen, d/2-time.Microsecond, "retry %d", attempt)
			require.LessOrEqual(t, chosen, d+time.Microsecond, "retry %d", attempt)
			clock.Add(m.NextAttemptAt.Sub(clock.Now())) // due now
		}

		clock.Add(time.Hour)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed)
		if n := b.Rejections(poisonKey); n >= 0 {
			require.Equal(t, attempts, n, "no fifth attempt")
		}

		arrived := b.Read(t, len(good), 30*time.Second)
		require.ElementsMatch(t, eventIDs(good, messageID), eventIDs(arrived, arrivedID), "the other messages went through once, the rejected one never")
		for _, m := range good {
			var got outbox.Message
			require.NoError(t, db.DB.First(&got, m.ID).Error)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Zero(t, got.RetryCount)
		}
	})
}

// failingEventHoldsTheNextOfItsPost rejects a post's first event: its
// second stays PENDING behind it however often the relay polls, and both
// arrive in order once the broker takes them.
func failingEventHoldsTheNextOfItsPost(t *testing.T, newBroker func(*testing.T) Broker) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		b := newBroker(t)
		clock := clocktest.New(time.Now().UTC())
		first := appendEvent(t, db.DB, 9, clock.Now())
		clock.Add(time.Millisecond)
		second := appendEvent(t, db.DB, 9, clock.Now())
		stopRejecting := b.Reject(t, "9")
		r, err := relay.New(outbox.NewStore(db).WithClock(clock.Now), b.NewSender(t, Options{}), relay.Config{InstanceID: "a",
			Interval: 20 * time.Millisecond, RetryBase: time.Second, Now: clock.Now, Logger: discard()})
		require.NoError(t, err)

		for range 2 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
			var m outbox.Message
			require.NoError(t, db.DB.First(&m, second.ID).Error)
			require.Equal(t, outbox.StatusPending, m.Status, "the second event waits behind the failing first")
			clock.Add(time.Minute)
		}
		stopRejecting()
		for range 2 {
			_, err := r.RunOnce(ctx)
			require.NoError(t, err)
		}
		arrived := b.Read(t, 2, 30*time.Second)
		require.Equal(t, []string{first.EventID, second.EventID}, eventIDs(arrived, arrivedID))
	})
}

// outageSpendsNoRetries runs a relay through two outages on every dialect.
// The first comes while the relay is idle and events keep coming: many
// polls find the broker down, none FAILs or sends, and once it is back
// every event arrives in post order, none twice. The second cuts the
// broker for 15 s in the middle of a backlog, sends in flight: nothing is
// sent while cut, and afterwards every event arrives in post order (an
// event whose send got no answer may arrive twice, in a row). No row
// spends a retry, and no poll fails, retries, recovers or fences.
func outageSpendsNoRetries(t *testing.T, newBroker func(*testing.T) Broker) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		b := newBroker(t)
		var o observer
		r, err := relay.New(outbox.NewStore(db), b.NewSender(t, Options{}), relay.Config{InstanceID: "relay-outage",
			Interval: 20 * time.Millisecond, BatchSize: 20, RetryBase: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
			OutageBackoffMax: 100 * time.Millisecond, Logger: discard(), Observe: o.observe("relay-outage")})
		require.NoError(t, err)
		rows := relaytest.Seed(t, db.DB, 50, 2, time.Now().Add(-time.Second))
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
		allSent := func() bool { return sentCount(t, db.DB) == int64(len(rows)) }
		require.Eventually(t, allSent, time.Minute, 20*time.Millisecond)

		// An idle relay; events keep coming while the broker is down.
		b.Down(t)
		before := o.unavailablePolls()
		idle := sentCount(t, db.DB)
		rows = append(rows, relaytest.Seed(t, db.DB, 50, 2, time.Now())...)
		// Longer than all retry backoffs together (10+20+40 ms): many polls find the broker down.
		require.Eventually(t, func() bool { return o.unavailablePolls()-before >= 8 }, time.Minute, 20*time.Millisecond)
		require.Zero(t, relaytest.CountByStatus(t, db.DB)[outbox.StatusFail])
		require.Equal(t, idle, sentCount(t, db.DB), "nothing sent while down")
		b.Up(t)
		require.Eventually(t, allSent, time.Minute, 20*time.Millisecond)
		seen := RequirePostOrder(t, b.Read(t, len(rows), 30*time.Second), rows, false)
		require.Len(t, seen, len(rows), "all delivered")

		// A cut in the middle of a backlog.
		earlier := sentCount(t, db.DB)
		rows = append(rows, relaytest.Seed(t, db.DB, 50, 20, time.Now().Add(-time.Second))...) // 1,000 events
		require.Eventually(t, func() bool { return sentCount(t, db.DB) >= earlier+100 }, time.Minute, 5*time.Millisecond)
		before = o.unavailablePolls()
		b.Down(t)
		cutAt := time.Now()
		require.Eventually(t, func() bool { return o.unavailablePolls() > before }, 30*time.Second, 10*time.Millisecond,
			"the relay noticed the outage")
		sentDuringCut := sentCount(t, db.DB)
		require.Less(t, sentDuringCut, int64(len(rows)), "the cut came too late to matter")
		time.Sleep(15*time.Second - time.Since(cutAt)) // the outage itself lasts 15 s
		require.Equal(t, sentDuringCut, sentCount(t, db.DB), "nothing sent while cut")
		b.Up(t)
		require.Eventually(t, allSent, 2*time.Minute, 50*time.Millisecond)
		r.Stop()

		var spent int64
		require.NoError(t, db.DB.Model(&outbox.Message{}).Select("COALESCE(SUM(retry_count), 0)").Scan(&spent).Error)
		require.Zero(t, spent, "retries spent by the outages")
		require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, db.DB))
		seen = RequirePostOrder(t, b.Read(t, len(rows), time.Minute), rows, true)
		require.Len(t, seen, len(rows), "every event delivered")
		o.mu.Lock()
		defer o.mu.Unlock()
		require.Empty(t, o.errs)
		bad := o.bad
		bad.Released = 0 // an outage hands claimed rows back: that is its point
		require.Equal(t, relay.Result{}, bad, "retried, failed, recovered or fenced rows")
		t.Logf("polls %d, of which broker unreachable %d; %d events", o.polls, o.unavailable, len(rows))
	})
}
