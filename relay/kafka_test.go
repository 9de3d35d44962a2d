package relay_test

import (
	"context"
	"fmt"
	"log/slog"

	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/bench/relaybench"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/internal/clocktest"
	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/relay/relaytest"
)

// kafkaINVALID_RECORD is a non-retriable produce error: the broker rejects the record.
const kafkaInvalidRecord int16 = 87

func newProducer(t testing.TB, b *kafkatest.Broker) *kafka.Producer {
	t.Helper()
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{b.Addr}, Topic: b.Topic}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// requirePerPostOrder checks that, for every post, the events on its
// partition appear in outbox id order, and returns the records by event id.
func requirePerPostOrder(t *testing.T, records []kafkatest.Record, rows []outbox.Message) map[string]int {
	t.Helper()
	idOf := map[string]int64{}
	for _, m := range rows {
		idOf[m.EventID] = m.ID
	}
	seen := map[string]int{}
	last := map[string]int64{}
	partOf := map[string]int32{}
	for _, r := range records {
		eid := r.Headers["event-id"]
		require.Equal(t, "POSTING_EVENT", r.Headers["event-type"])
		id, ok := idOf[eid]
		require.True(t, ok, "unknown event id %s", eid)
		seen[eid]++
		if p, ok := partOf[r.Key]; ok {
			require.Equal(t, p, r.Partition, "post %s moved partitions", r.Key)
		}
		partOf[r.Key] = r.Partition
		require.Greater(t, id, last[r.Key], "post %s: event %d after %d", r.Key, id, last[r.Key])
		last[r.Key] = id
	}
	return seen
}

// The same through PgBouncer in transaction pooling (the "pgbouncer"
// subtest): statements of one relay land on different server connections.
func TestFourRelaysSendEveryEventOnceInPostOrder(t *testing.T) {
	t.Parallel()
	for _, name := range append(databasetest.Dialects, "pgbouncer") {
		dialect := name
		if name == "pgbouncer" {
			dialect = database.PostgreSQL
		}
		t.Run(string(name), func(t *testing.T) {
			t.Parallel()
			const instances, perPost = 4, 5
			// 10,000 events on MariaDB and PostgreSQL. SQLite is the single-process embedded
			// mode and serializes every write transaction, so four instances on
			// one file only queue on its lock (about 80 s for 10,000 events under
			// -race): 2,000 events prove the same guarantees there.
			posts, batch := 2000, 500
			if dialect == database.SQLite {
				// Smaller batches so that each round of heads is shared out:
				// SQLite's busy handler is not fair (a relay that just
				// released the write lock often takes it again before one
				// that sleeps in its backoff), and with batches of 50 a relay
				// sometimes got only 50 of 2,000 events, or none under load.
				posts, batch = 400, 25
			}
			var pools []*database.DB
			if name == "pgbouncer" {
				pools = relaytest.OpenPooledPostgres(t, "relay", instances)
			} else {
				pools = relaytest.OpenPools(t, dialect, "relay", instances)
			}
			broker := kafkatest.Start(t)
			rows := relaytest.Seed(t, pools[0].DB, posts, perPost, time.Now().Add(-time.Second))

			ctx := context.Background()
			claimed := make([]atomic.Int64, instances)
			// Every poll must succeed and nothing may be retried, recovered
			// or fenced: with no crash and a healthy broker, anything else
			// is a defect, even if the events get through in the end.
			var mu sync.Mutex
			var pollErrs []string
			var unexpected relay.Result
			var relays []*relay.Relay
			for i, db := range pools {
				r, err := relay.New(outbox.NewStore(db), newProducer(t, broker), relay.Config{
					InstanceID: fmt.Sprintf("relay-%d", i), Interval: 20 * time.Millisecond, BatchSize: batch,
					Logger: slog.New(slog.DiscardHandler),
					Observe: func(res relay.Result, _ time.Duration, err error) {
						claimed[i].Add(int64(res.Claimed))
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							pollErrs = append(pollErrs, fmt.Sprintf("relay-%d: %v", i, err))
						}
						unexpected.Retried += res.Retried
						unexpected.Failed += res.Failed
						unexpected.Released += res.Released
						unexpected.Recovered += res.Recovered
						unexpected.RecoveredFailed += res.RecoveredFailed
						unexpected.Fenced += res.Fenced
					},
				})
				require.NoError(t, err)
				relays = append(relays, r)
			}
			for _, r := range relays {
				require.NoError(t, r.Start(ctx))
				t.Cleanup(r.Stop) // also when an assertion below fails
			}
			require.Eventually(t, func() bool {
				return relaytest.CountByStatus(t, pools[0].DB)[outbox.StatusSent] == int64(len(rows))
			}, 2*time.Minute, 50*time.Millisecond)
			for _, r := range relays {
				r.Stop()
			}
			mu.Lock()
			require.Empty(t, pollErrs, "relay polls failed")
			require.Equal(t, relay.Result{}, unexpected, "retried, failed, released, recovered or fenced rows")
			mu.Unlock()

			require.Equal(t, map[outbox.Status]int64{outbox.StatusSent: int64(len(rows))}, relaytest.CountByStatus(t, pools[0].DB))
			records := broker.Records(t, len(rows), 30*time.Second)
			require.Len(t, records, len(rows), "every event exactly once")
			seen := requirePerPostOrder(t, records, rows)
			require.Len(t, seen, len(rows))
			for eid, n := range seen {
				require.Equal(t, 1, n, "event %s sent %d times", eid, n)
			}
			// The relays shared the work, though not necessarily all four:
			// a pipelined relay holds two batches in flight, so two relays
			// can hold every post's head (2,000 posts, batches of 500),
			// and a relay that starts a moment later may find nothing to
			// claim until the end.
			took := 0
			for i := range claimed {
				if claimed[i].Load() > 0 {
					took++
				}
				t.Logf("relay-%d claimed %d", i, claimed[i].Load())
			}
			require.GreaterOrEqual(t, took, 2, "relays that claimed anything")
		})
	}
}

// keysOnOtherPartitions returns n post ids whose partitions differ from poison's.
func keysOnOtherPartitions(poison int64, partitions int32, n int) []int64 {
	bad := kafkatest.PartitionFor(strconv.FormatInt(poison, 10), partitions)
	var out []int64
	for id := poison + 1; len(out) < n; id++ {
		if kafkatest.PartitionFor(strconv.FormatInt(id, 10), partitions) != bad {
			out = append(out, id)
		}
	}
	return out
}

func appendEvent(t *testing.T, db *gorm.DB, post int64, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.Append(db, eventtest.Outbox(t, event.PostingEvent, post, at, map[string]any{"action": "CREATED"}))
	require.NoError(t, err)
	return *m
}

func TestBrokerRejectionRetriesThenFails(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		broker := kafkatest.Start(t)
		clock := clocktest.New(time.Now().UTC())
		const poison = 1
		others := keysOnOtherPartitions(poison, broker.Partitions, 5)
		bad := appendEvent(t, db.DB, poison, clock.Now())
		var good []outbox.Message
		for _, id := range others {
			good = append(good, appendEvent(t, db.DB, id, clock.Now()))
		}
		broker.RejectKey(strconv.Itoa(poison), kafkaInvalidRecord)

		r, err := relay.New(outbox.NewStore(db).WithClock(clock.Now), newProducer(t, broker), relay.Config{InstanceID: "a",
			Interval: 20 * time.Millisecond, RetryBase: time.Second, RetryMax: time.Minute, Now: clock.Now})
		require.NoError(t, err)

		var delays []time.Duration
		for attempt := 1; attempt <= 4; attempt++ {
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, attempt, broker.Rejections(strconv.Itoa(poison)))
			var m outbox.Message
			require.NoError(t, db.DB.First(&m, bad.ID).Error)
			require.Equal(t, attempt, m.RetryCount)
			require.Contains(t, *m.LastError, "INVALID_RECORD")
			if attempt < 4 {
				require.Equal(t, outbox.StatusRetry, m.Status)
				delays = append(delays, m.NextAttemptAt.Sub(clock.Now()))
				clock.Add(delays[len(delays)-1])
			} else {
				require.Equal(t, 1, res.Failed)
				require.Equal(t, outbox.StatusFail, m.Status, "FAIL after exactly 4 attempts")
			}
		}
		require.Greater(t, delays[1], delays[0])
		require.Greater(t, delays[2], delays[1])

		clock.Add(time.Hour)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed)
		require.Equal(t, 4, broker.Rejections(strconv.Itoa(poison)), "no fifth attempt")

		records := broker.Records(t, len(good), 10*time.Second)
		require.Len(t, records, len(good), "the other messages went through once")
		for _, m := range good {
			var got outbox.Message
			require.NoError(t, db.DB.First(&got, m.ID).Error)
			require.Equal(t, outbox.StatusSent, got.Status)
			require.Zero(t, got.RetryCount)
		}
	})
}

func TestFailingEventHoldsTheNextOfItsPost(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		broker := kafkatest.Start(t)
		clock := clocktest.New(time.Now().UTC())
		first := appendEvent(t, db.DB, 9, clock.Now())
		clock.Add(time.Millisecond)
		second := appendEvent(t, db.DB, 9, clock.Now())
		stopRejecting := broker.RejectKey("9", kafkaInvalidRecord)
		r, err := relay.New(outbox.NewStore(db).WithClock(clock.Now), newProducer(t, broker), relay.Config{InstanceID: "a",
			Interval: 20 * time.Millisecond, RetryBase: time.Second, Now: clock.Now})
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
		records := broker.Records(t, 2, 10*time.Second)
		require.Len(t, records, 2)
		require.Equal(t, first.EventID, records[0].Headers["event-id"])
		require.Equal(t, second.EventID, records[1].Headers["event-id"])
	})
}

func TestBrokerOutageLosesNothingAndSpendsNoRetries(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		broker := kafkatest.Start(t, kafkatest.WithDataDir(t.TempDir()))
		var polls, unavailable atomic.Int64
		r, err := relay.New(outbox.NewStore(db), newProducer(t, broker), relay.Config{InstanceID: "a",
			Interval: 20 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
			OutageBackoffMax: 100 * time.Millisecond, StaleAfter: 2 * time.Minute,
			Logger: slog.New(slog.DiscardHandler),
			Observe: func(res relay.Result, _ time.Duration, _ error) {
				polls.Add(1)
				if res.Unavailable {
					unavailable.Add(1)
				}
			}})
		require.NoError(t, err)
		rows := relaytest.Seed(t, db.DB, 50, 2, time.Now().Add(-time.Second))
		require.NoError(t, r.Start(ctx))
		defer r.Stop()
		require.Eventually(t, func() bool {
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, time.Minute, 20*time.Millisecond)

		broker.Stop()
		// Events keep coming while the broker is down.
		rows = append(rows, relaytest.Seed(t, db.DB, 50, 2, time.Now())...)
		// Longer than all retry backoffs together (10+20+40 ms): many polls find the broker down.
		require.Eventually(t, func() bool { return unavailable.Load() >= 8 }, time.Minute, 20*time.Millisecond)
		require.Zero(t, relaytest.CountByStatus(t, db.DB)[outbox.StatusFail])
		broker.Restart(t)

		require.Eventually(t, func() bool {
			return relaytest.CountByStatus(t, db.DB)[outbox.StatusSent] == int64(len(rows))
		}, time.Minute, 20*time.Millisecond)
		r.Stop()
		var retried int64
		require.NoError(t, db.DB.Model(&outbox.Message{}).Where("retry_count > 0").Count(&retried).Error)
		require.Zero(t, retried, "the outage spent no retries")
		records := broker.Records(t, len(rows), 30*time.Second)
		seen := requirePerPostOrder(t, records, rows)
		require.Len(t, seen, len(rows), "all delivered")
		t.Logf("polls %d, of which broker unreachable %d; records %d for %d events", polls.Load(), unavailable.Load(), len(records), len(rows))
	})
}

// BenchmarkRelay measures one relay instance moving 10,000 seeded events from
// the database to the in-process broker, claim + send + ack, in events/s
// (relaybench.Relay: Pump back to back, as the relay's loop polls).
func BenchmarkRelay(b *testing.B) {
	for _, dialect := range databasetest.Dialects {
		for _, batch := range []int{100, 500, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", dialect, batch), func(b *testing.B) {
				db := databasetest.New(b, dialect)
				producer := newProducer(b, kafkatest.Start(b))
				const events = 10000
				var total time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					require.NoError(b, relaybench.Seed(context.Background(), db.DB, events))
					b.StartTimer()
					res, err := relaybench.Relay(context.Background(), db.DB, producer, batch)
					require.NoError(b, err)
					require.Equal(b, events, res.Events, "every event sent")
					total += res.Elapsed
				}
				b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
			})
		}
	}
}
