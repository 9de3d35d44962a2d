package wakeup

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// BenchmarkCommitToBroker measures, on PostgreSQL, how long an event takes
// from the commit of its transaction (one instance's pool, its writers
// wired with its Notifier as serve does) to a consumer of
// the in-process broker, with another instance's relay at the default 5 s
// interval woken by the listener: 200 events/s for 10 s, each in its own
// transaction. It reports p50/p99/max in ms; b.N is ignored (-benchtime=1x).
//
//	go test -run '^$' -bench CommitToBroker -benchtime=1x ./internal/send/wakeup/
func BenchmarkCommitToBroker(b *testing.B) {
	writer, relayDB, producer, broker := twoInstances(b)
	r, err := relay.New(outbox.NewStore(relayDB), producer, relay.Config{InstanceID: "relay", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	l, err := New(Config{Connect: relayDB.ConnectPostgres, Channel: outbox.NotifyChannel, Wake: r.Wake, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	require.NoError(b, r.Start(context.Background()))
	b.Cleanup(r.Stop)
	require.NoError(b, l.Start(context.Background()))
	b.Cleanup(l.Stop)
	time.Sleep(500 * time.Millisecond) // the listener's first connection and wake
	commitToBroker(b, startNotifier(b, writer), broker)
}

// BenchmarkCommitToBrokerLocal is BenchmarkCommitToBroker on every dialect
// with one instance and no LISTEN: the writer's db carries the relay's Wake
// (database.WithCommitWaker, as serve wires it), so each commit wakes the
// local relay, which polls at the default 5 s interval otherwise.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 \
//	  go test -run '^$' -bench CommitToBrokerLocal -benchtime=1x ./internal/send/wakeup/
func BenchmarkCommitToBrokerLocal(b *testing.B) {
	for _, dialect := range databasetest.Dialects {
		b.Run(string(dialect), func(b *testing.B) {
			db := databasetest.New(b, dialect)
			broker := kafkatest.Start(b)
			producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic},
				slog.New(slog.DiscardHandler))
			require.NoError(b, err)
			b.Cleanup(func() { _ = producer.Close() })
			r, err := relay.New(outbox.NewStore(db), producer, relay.Config{InstanceID: "relay", Logger: slog.New(slog.DiscardHandler)})
			require.NoError(b, err)
			require.NoError(b, r.Start(context.Background()))
			b.Cleanup(r.Stop)
			commitToBroker(b, database.WithCommitWaker(db.DB, r.Wake), broker)
		})
	}
}

// commitToBroker commits 200 events/s for 10 s through writer, each in its
// own transaction, and reports how long each took from its commit to a
// consumer of broker (p50/p99/max in ms).
func commitToBroker(b *testing.B, writer *gorm.DB, broker *kafkatest.Broker) {
	const (
		rate     = 200
		duration = 10 * time.Second
	)
	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		received  = map[string]time.Time{}
	)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addr), kgo.ConsumeTopics(broker.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond))
	require.NoError(b, err)
	defer cl.Close()
	cctx, stopConsumer := context.WithCancel(context.Background())
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for cctx.Err() == nil {
			fetches := cl.PollFetches(cctx)
			at := time.Now()
			fetches.EachRecord(func(rec *kgo.Record) {
				for _, h := range rec.Headers {
					if h.Key == "event-id" {
						mu.Lock()
						received[string(h.Value)] = at
						mu.Unlock()
					}
				}
			})
		}
	}()
	b.ResetTimer()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	end := time.Now().Add(duration)
	for n := int64(1); time.Now().Before(end); n++ {
		<-tick.C
		ev := reservationtest.Outbox(b, event.PostingEvent, n, time.Now(), map[string]any{"action": "CREATED"})
		require.NoError(b, database.Transaction(context.Background(), writer, func(tx *gorm.DB) error {
			_, err := outbox.Append(tx, ev)
			return err
		}))
		mu.Lock()
		committed[ev.ID] = time.Now()
		mu.Unlock()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		done := len(received) >= len(committed)
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopConsumer()
	<-consumed
	b.StopTimer()

	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, len(committed))
	for id, c := range committed {
		got, ok := received[id]
		require.True(b, ok, "event %s never reached the consumer", id)
		lat = append(lat, max(got.Sub(c), 0))
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(len(lat)), "events")
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(q(1), "max_ms")
}

// BenchmarkCommitToBrokerPgBouncer is BenchmarkCommitToBroker through
// PgBouncer in transaction pooling, beside direct PostgreSQL in the same run:
//
//   - direct: no pooler, LISTEN on the same server (as BenchmarkCommitToBroker);
//   - pgbouncer/direct-url: the pool goes through PgBouncer, LISTEN on
//     POSTING_DATABASE_DIRECT_URL; events appended by another instance;
//   - pgbouncer/pooled-own: no direct URL, events appended by the relay's own
//     instance, whose commits wake its relay (database.WithCommitWaker);
//   - pgbouncer/pooled-other: no direct URL, events appended by another
//     instance, so the relay finds them by polling (default 5 s).
//
// It reports p50/p99/max in ms; b.N is ignored. Skipped without pgbouncer
// unless POSTING_TEST_REQUIRE_PGBOUNCER=1.
//
//	go test -run '^$' -bench CommitToBrokerPgBouncer -benchtime=1x ./internal/send/wakeup/
func BenchmarkCommitToBrokerPgBouncer(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		benchPooled(b, false, true, false)
	})
	b.Run("pgbouncer/direct-url", func(b *testing.B) {
		benchPooled(b, true, true, false)
	})
	b.Run("pgbouncer/pooled-own", func(b *testing.B) {
		benchPooled(b, true, false, true)
	})
	b.Run("pgbouncer/pooled-other", func(b *testing.B) {
		benchPooled(b, true, false, false)
	})
}

// benchPooled runs commitToBroker with a relay instance and, unless own, a
// separate writer instance; through pgbouncer when pooled, with a LISTEN
// listener on the direct URL when listen.
func benchPooled(b *testing.B, pooled, listen, own bool) {
	direct := databasetest.PostgresURL(b, "")
	url := direct
	if pooled {
		url = pgbouncertest.Start(b, direct, pgbouncertest.Transaction)
	}
	writer, relayDB, producer, broker := twoInstancesAt(b, url)
	r, err := relay.New(outbox.NewStore(relayDB), producer, relay.Config{InstanceID: "relay", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	require.NoError(b, r.Start(context.Background()))
	b.Cleanup(r.Stop)
	if listen {
		require.NoError(b, relayDB.SetDirectURL(direct))
		l, err := New(Config{Connect: relayDB.ConnectPostgres, Channel: outbox.NotifyChannel, Wake: r.Wake, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		require.NoError(b, l.Start(context.Background()))
		b.Cleanup(l.Stop)
		time.Sleep(500 * time.Millisecond) // the listener's first connection and wake
	}
	if own {
		commitToBroker(b, database.WithCommitWaker(relayDB.DB, r.Wake), broker)
		return
	}
	// The writer instance NOTIFYs after its commits, as serve's does
	// (through the pooler when pooled).
	commitToBroker(b, startNotifier(b, writer), broker)
}

// BenchmarkWritersNotify measures what wake-ups cost writers on PostgreSQL:
// 8 writers commit 4,000 single-row outbox appends, first with NOTIFY run
// inside each writing transaction (as appends used to), then with the
// instance's Notifier sending it after the commits, coalesced; a listener
// hears both. It reports both durations and their ratio (inside / after);
// b.N is ignored (-benchtime=1x).
//
//	go test -run '^$' -bench WritersNotify -benchtime=1x ./internal/send/wakeup/
func BenchmarkWritersNotify(b *testing.B) {
	const writers, commits = 8, 4000
	db := databasetest.NewPostgres(b)
	sqlDB, err := db.DB.DB()
	require.NoError(b, err)
	sqlDB.SetMaxOpenConns(writers + 2)
	sqlDB.SetMaxIdleConns(writers + 2)
	startListener(b, db, func() {})

	run := func(w *gorm.DB, inside bool) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range commits / writers {
					ev := reservationtest.Outbox(b, event.PostingEvent, int64(g*commits+i+1), time.Now(), nil)
					err := database.Transaction(context.Background(), w, func(tx *gorm.DB) error {
						if _, err := outbox.Append(tx, ev); err != nil {
							return err
						}
						if inside {
							return tx.Exec("NOTIFY " + outbox.NotifyChannel).Error
						}
						return nil
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	insideTook := run(db.DB, true)
	afterTook := run(startNotifier(b, db), false)
	b.StopTimer()
	b.ReportMetric(insideTook.Seconds(), "inside_s")
	b.ReportMetric(afterTook.Seconds(), "after_s")
	b.ReportMetric(insideTook.Seconds()/afterTook.Seconds(), "ratio")
	b.Logf("%d writers, %d commits: NOTIFY inside the transaction %s, coalesced after the commit %s: %.2fx faster",
		writers, commits, insideTook.Round(time.Millisecond), afterTook.Round(time.Millisecond), insideTook.Seconds()/afterTook.Seconds())
}
