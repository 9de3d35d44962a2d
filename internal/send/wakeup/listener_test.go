package wakeup

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// TestConfigValidationNamesTheFirstSettingOut: with RetryBase (or RetryMax)
// and ProbeWait both out of their limits, the refusal names the retry
// setting, the first of them in the Config (RetryBase was named first
// before the retry check moved into backoff.CheckRetry).
func TestConfigValidationNamesTheFirstSettingOut(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Connect = func(context.Context) (*pgx.Conn, error) { return nil, errors.New("unused") }
	c.Channel, c.Wake = "posting_outbox", func() {}
	c.RetryBase, c.ProbeWait = -time.Second, -time.Second
	require.ErrorContains(t, c.Validate(), "wakeup.Config.RetryBase ")
	c.RetryBase, c.RetryMax = time.Second, time.Millisecond
	require.ErrorContains(t, c.Validate(), "wakeup.Config.RetryMax ")
}

// startListener starts a Listener on db that calls wake, and returns a
// channel that receives once per LISTEN on a new connection.
func startListener(t testing.TB, db *database.DB, wake func()) <-chan struct{} {
	t.Helper()
	return startListenerPID(t, db, wake, new(atomic.Uint32))
}

// startListenerPID is startListener that keeps the server's process id of
// the listening session in pid.
func startListenerPID(t testing.TB, db *database.DB, wake func(), pid *atomic.Uint32) <-chan struct{} {
	t.Helper()
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		conn, err := db.ConnectPostgres(ctx)
		if err == nil {
			pid.Store(conn.PgConn().PID())
		}
		return conn, err
	}
	l, err := New(Config{Connect: connect, Channel: outbox.NotifyChannel, Wake: wake,
		CheckEvery: 200 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	listening := make(chan struct{}, 10)
	l.listening = func() { listening <- struct{}{} }
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)
	return listening
}

// startNotifier starts the Notifier of an instance whose pool is db, as
// serve wires it, and returns the commit waker its writers carry.
func startNotifier(t testing.TB, db *database.DB) *gorm.DB {
	t.Helper()
	n, err := NewNotifier(NotifierConfig{Send: func(ctx context.Context) error { return outbox.Announce(db.DB.WithContext(ctx), "") },
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(n.Stop)
	return database.WithCommitWaker(db.DB, n.Notify)
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// An append through a writer wired with the instance's Notifier wakes the
// listener after its transaction commits, not before, and never for a
// rollback; the append itself runs no NOTIFY (a transaction without the
// waker wakes nobody); a dropped connection is replaced, and the new one
// wakes once on its own for what it may have missed.
func TestListenerWakesOnCommitAndReconnects(t *testing.T) {
	t.Parallel()
	db := databasetest.NewPostgres(t)
	var wakes atomic.Int64
	woken := make(chan struct{}, 100)
	var pid atomic.Uint32
	listening := startListenerPID(t, db, func() { wakes.Add(1); woken <- struct{}{} }, &pid)
	waitFor(t, listening, "LISTEN")
	waitFor(t, woken, "the wake after connecting")

	writer := startNotifier(t, db)
	ctx := context.Background()
	require.NoError(t, database.Transaction(ctx, writer, func(tx *gorm.DB) error {
		for i := range 3 {
			if _, err := outbox.Append(tx, reservationtest.Outbox(t, event.PostingEvent, int64(i+1), time.Now(), map[string]any{"action": "CREATED"})); err != nil {
				return err
			}
		}
		select {
		case <-woken:
			t.Error("woken before the commit")
		case <-time.After(300 * time.Millisecond):
		}
		return nil
	}))
	waitFor(t, woken, "the notification of the commit")
	select {
	case <-woken:
		t.Error("three appends in one transaction woke twice")
	case <-time.After(300 * time.Millisecond):
	}

	_ = database.Transaction(ctx, writer, func(tx *gorm.DB) error {
		_, err := outbox.Append(tx, reservationtest.Outbox(t, event.PostingEvent, 9, time.Now(), map[string]any{"action": "CREATED"}))
		require.NoError(t, err)
		return context.Canceled // roll back
	})
	select {
	case <-woken:
		t.Error("a rolled back append woke the listener")
	case <-time.After(300 * time.Millisecond):
	}

	// No waker: the committed append itself notified nobody.
	require.NoError(t, database.Transaction(ctx, db.DB, func(tx *gorm.DB) error {
		_, err := outbox.Append(tx, reservationtest.Outbox(t, event.PostingEvent, 10, time.Now(), map[string]any{"action": "CREATED"}))
		return err
	}))
	select {
	case <-woken:
		t.Error("an append ran NOTIFY inside its transaction")
	case <-time.After(300 * time.Millisecond):
	}

	// The server ends the listening session: the listener connects again.
	var killed bool
	require.NoError(t, db.Raw("SELECT pg_terminate_backend(?)", pid.Load()).Scan(&killed).Error)
	require.True(t, killed, "the listening session")
	waitFor(t, listening, "LISTEN on a new connection")
	waitFor(t, woken, "the wake after reconnecting")
	require.NoError(t, db.Exec("NOTIFY "+outbox.NotifyChannel).Error)
	waitFor(t, woken, "a notification on the new connection")
}

// twoInstances returns two pools on one fresh migrated PostgreSQL database,
// as two instances of the service hold, and a producer to an in-process
// broker.
func twoInstances(t testing.TB) (writer, relayDB *database.DB, producer *kafka.Producer, broker *kafkatest.Broker) {
	t.Helper()
	return twoInstancesAt(t, databasetest.URL(t, database.PostgreSQL, "wakeup"))
}

// twoInstancesAt is twoInstances on the database of url.
func twoInstancesAt(t testing.TB, url string) (writer, relayDB *database.DB, producer *kafka.Producer, broker *kafkatest.Broker) {
	t.Helper()
	pools := databasetest.Pools(t, url, 2)
	writer, relayDB = pools[0], pools[1]
	broker = kafkatest.Start(t)
	producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	return writer, relayDB, producer, broker
}

// The wakeup promise: a row appended by one instance (its writers wired
// with its Notifier, as serve does) is claimed and sent by another
// instance's relay long before its 5 s poll interval.
func TestAppendWakesAnotherInstancesRelay(t *testing.T) {
	t.Parallel()
	writerDB, relayDB, producer, _ := twoInstances(t)
	writer := startNotifier(t, writerDB)
	idle := make(chan struct{}, 100)
	r, err := relay.New(outbox.NewStore(relayDB), producer, relay.Config{
		InstanceID: "b", Interval: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Observe: func(res relay.Result, _ time.Duration, err error) {
			if err == nil && res.Claimed == 0 {
				select {
				case idle <- struct{}{}:
				default:
				}
			}
		}})
	require.NoError(t, err)
	listening := startListener(t, relayDB, r.Wake)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	waitFor(t, listening, "LISTEN")
	waitFor(t, idle, "the relay's first poll")
	// The wake after connecting may come after that poll: let its poll pass.
	time.Sleep(200 * time.Millisecond)
	for len(idle) > 0 {
		<-idle
	}

	for round := range 3 {
		start := time.Now()
		var id int64
		require.NoError(t, database.Transaction(context.Background(), writer, func(tx *gorm.DB) error {
			m, err := outbox.Append(tx, reservationtest.Outbox(t, event.PostingEvent, int64(round+1), time.Now(), map[string]any{"action": "CREATED"}))
			if err == nil {
				id = m.ID
			}
			return err
		}))
		deadline := time.Now().Add(3 * time.Second)
		for {
			var m outbox.Message
			require.NoError(t, writer.Where("id = ?", id).Take(&m).Error)
			if m.Status == outbox.StatusSent {
				break
			}
			require.True(t, time.Now().Before(deadline), "round %d: row %d still %s after %s", round, id, m.Status, time.Since(start))
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(start)
		t.Logf("round %d: appended to SENT in %s", round, took)
		require.Less(t, took, time.Second, "round %d: the relay woke on the notification, not its 5s interval", round)
		time.Sleep(100 * time.Millisecond) // the next round starts from a pause
	}
}

// A post created through the service, whose db was wired with the local
// relay's Wake (as serve does), is on the topic long before the relay's
// default 5 s interval would have polled: the commit woke the relay. On
// every dialect, with no LISTEN anywhere.
func TestServiceCommitWakesLocalRelay(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		broker := kafkatest.Start(t)
		producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic},
			slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(func() { _ = producer.Close() })
		var polls atomic.Int32
		r, err := relay.New(outbox.NewStore(db), producer, relay.Config{InstanceID: "local",
			Logger: slog.New(slog.DiscardHandler), Observe: func(relay.Result, time.Duration, error) { polls.Add(1) }})
		require.NoError(t, err)
		require.Equal(t, 5*time.Second, r.Config().Interval, "the default interval")
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
		// The first poll (at start) is done: the next one by the clock is
		// 5 s away.
		require.Eventually(t, func() bool { return polls.Load() >= 1 }, 10*time.Second, 5*time.Millisecond)

		posts, err := reservation.NewService(database.WithCommitWaker(db.DB, r.Wake), reservation.ServiceConfig{})
		require.NoError(t, err)
		const n = 3
		for i := range n {
			p, err := posts.Create(context.Background(), reservation.CreateInput{Title: "wake", Content: "on commit",
				ScheduledAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			// Well inside the interval; each create comes right after the
			// poll that sent the one before, so a poll by the clock is ~5 s off.
			require.Eventually(t, func() bool {
				var m outbox.Message
				require.NoError(t, db.Where("aggregate_id = ?", p.ID).First(&m).Error)
				return m.Status == outbox.StatusSent
			}, 2*time.Second, 5*time.Millisecond, "event %d of post %d not sent within 2 s", i, p.ID)
		}
		recs := broker.Records(t, n, 10*time.Second)
		require.Len(t, recs, n)
	})
}

// openThroughPgBouncer opens a fresh PostgreSQL database through its own
// PgBouncer in transaction pooling, and returns it with the database's
// direct URL.
func openThroughPgBouncer(t *testing.T) (*database.DB, string) {
	t.Helper()
	direct := databasetest.PostgresURL(t, "")
	db := databasetest.Open(t, pgbouncertest.Start(t, direct, pgbouncertest.Transaction))
	return db, direct
}

// startProbingListener starts a Listener whose LISTEN connection is db's
// (ConnectPostgres) and whose probe goes through db's pool, logging to the
// returned buffer; woken receives every wake.
func startProbingListener(t *testing.T, db *database.DB) (*Listener, *logtest.Buffer, <-chan struct{}) {
	t.Helper()
	return startProbingListenerWith(t, db, outbox.Notify(db.DB))
}

// startProbingListenerWith is startProbingListener whose probe is sent by
// notify.
func startProbingListenerWith(t *testing.T, db *database.DB, notify func(context.Context, string) error) (*Listener, *logtest.Buffer, <-chan struct{}) {
	t.Helper()
	logs := &logtest.Buffer{}
	woken := make(chan struct{}, 100)
	l, err := New(Config{Connect: db.ConnectPostgres, Channel: outbox.NotifyChannel,
		Wake:       func() { woken <- struct{}{} },
		Notify:     notify,
		ProbeWait:  time.Second,
		CheckEvery: 200 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)
	return l, logs, woken
}

// Through PgBouncer in transaction mode a LISTEN session does not last: the
// listener finds out from the pooler's process id before it listens, logs
// one warning naming the pooler and POSTING_DATABASE_DIRECT_URL, and stops
// instead of reconnecting.
func TestListenerThroughTransactionPoolerWarnsOnceAndStops(t *testing.T) {
	t.Parallel()
	db, _ := openThroughPgBouncer(t)
	out := warningsUntilStopped(t, db)
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	require.Contains(t, out, "pooler in transaction mode")
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL")
}

// Through PgBouncer in session mode, where a LISTEN would hear its probe,
// the listener cannot tell the mode from the pooler's process id: it warns
// once and stops the same way, and the direct URL is the fix there too.
func TestListenerThroughSessionPoolerWarnsOnceAndStops(t *testing.T) {
	t.Parallel()
	db := databasetest.Open(t, pgbouncertest.Start(t, databasetest.PostgresURL(t, ""), pgbouncertest.Session))
	out := warningsUntilStopped(t, db)
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL")
}

// warningsUntilStopped runs a probing listener on db until it stops, and
// returns its logs; it fails if the listener keeps going.
func warningsUntilStopped(t *testing.T, db *database.DB) string {
	t.Helper()
	l, logs, _ := startProbingListener(t, db)
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("the listener kept going through the pooler\n%s", logs.String())
	}
	return logs.String()
}

// Once the listener has given up on PgBouncer in transaction mode, no
// pooled server session is left listening on the channel, and statements
// through the pool read their own results while the channel is notified.
// A session left listening receives every later notification unasked, and
// PgBouncer 1.18 can take one that arrives during its server check for the
// check's answer: it hands the session to a client with the answer of
// "select 1" still to come, so that client's statement reads it, and each
// of its next ones the result of the one before. With one server session
// behind the pooler, that session is the one the listener's statements ran
// on.
func TestListenerThroughTransactionPoolerLeavesNoSessionListening(t *testing.T) {
	t.Parallel()
	direct := databasetest.PostgresURL(t, "")
	db := databasetest.Open(t, pgbouncertest.StartWithPoolSize(t, direct, pgbouncertest.Transaction, 1))
	require.Contains(t, warningsUntilStopped(t, db), "pooler in transaction mode")

	var channels int64
	require.NoError(t, db.DB.Raw("SELECT count(*) FROM pg_listening_channels()").Scan(&channels).Error)
	require.Zero(t, channels, "the pooled server session listens on the channel")

	ctx := context.Background()
	notifier, err := pgx.Connect(ctx, direct)
	require.NoError(t, err)
	t.Cleanup(func() { _ = notifier.Close(context.Background()) })
	for i := range 300 {
		_, err := notifier.Exec(ctx, "SELECT pg_notify($1, 'commit')", outbox.NotifyChannel)
		require.NoError(t, err)
		var got int64
		require.NoError(t, db.DB.WithContext(ctx).Raw("SELECT ?::bigint + 1000", i).Scan(&got).Error, "statement %d", i)
		require.Equal(t, int64(i+1000), got, "statement %d read another statement's result", i)
	}
}

// failingFirstSend is a probe sender through db's pool whose first send
// fails (a pool restarting), counting every send in sends.
func failingFirstSend(db *database.DB, sends *atomic.Int32) func(context.Context, string) error {
	return func(ctx context.Context, payload string) error {
		if sends.Add(1) == 1 {
			return errors.New("pool restarting")
		}
		return outbox.Notify(db.DB)(ctx, payload)
	}
}

// Through the pooler the listener finds the pooler before it probes: with
// a probe send that would fail (the pooler restarting as serve starts) it
// sends none, and warns and stops instead of listening on a session that
// never hears anything.
func TestListenerThroughTransactionPoolerStopsBeforeAnyProbeSend(t *testing.T) {
	t.Parallel()
	db, _ := openThroughPgBouncer(t)
	var sends atomic.Int32
	notify := failingFirstSend(db, &sends)
	l, logs, _ := startProbingListenerWith(t, db, notify)
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("the listener kept listening through the pooler after %d probe sends\n%s", sends.Load(), logs.String())
	}
	require.Contains(t, logs.String(), "pooler in transaction mode")
	require.Zero(t, sends.Load(), "a probe was sent through the pooler")
}

// A probe that could not be sent proves nothing: on a direct server the
// next connection probes again, hears it, and the listener stays up and
// wakes, without the pooler's warning.
func TestListenerProbesAgainAfterAFailedSend(t *testing.T) {
	t.Parallel()
	db := databasetest.Open(t, databasetest.PostgresURL(t, ""))
	var sends atomic.Int32
	notify := failingFirstSend(db, &sends)
	l, logs, woken := startProbingListenerWith(t, db, notify)
	waitWokenOnDirectServer(t, l, logs, woken, "the wake after the second probe")
	require.Equal(t, int32(2), sends.Load())
	require.NotContains(t, logs.String(), "pooler", logs.String())
}

// waitWokenOnDirectServer waits for l's first wake (what), failing if l
// stops first, as it must not on a direct server.
func waitWokenOnDirectServer(t *testing.T, l *Listener, logs *logtest.Buffer, woken <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-woken:
	case <-l.Done():
		t.Fatalf("the listener stopped on a direct server\n%s", logs.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s\n%s", what, logs.String())
	}
}

// A probe whose send used up the wait (a busy pool handing over a
// connection only as the wait ends) is no sign of a pooler: on a direct
// server the listener gets its own wait for the delivery, stays up without
// a warning, and wakes.
func TestListenerOnDirectServerDoesNotWarnWhenTheProbeSendIsSlow(t *testing.T) {
	t.Parallel()
	db := databasetest.Open(t, databasetest.PostgresURL(t, ""))
	notify := func(ctx context.Context, payload string) error {
		<-ctx.Done()
		return outbox.Notify(db.DB)(context.WithoutCancel(ctx), payload)
	}
	l, logs, woken := startProbingListenerWith(t, db, notify)
	waitWokenOnDirectServer(t, l, logs, woken, "the wake after connecting")
	require.NotContains(t, logs.String(), "level=WARN")
}

// With the direct URL set, the pool still goes through PgBouncer but the
// listener's session does not: its probe arrives, nothing is logged, and a
// commit through the pooler wakes it.
func TestListenerOnDirectURLHearsCommitsThroughThePooler(t *testing.T) {
	t.Parallel()
	db, direct := openThroughPgBouncer(t)
	require.NoError(t, db.SetDirectURL(direct))

	l, logs, woken := startProbingListener(t, db)
	waitFor(t, woken, "the wake after connecting")
	for len(woken) > 0 {
		<-woken
	}
	require.NoError(t, outbox.Notify(db.DB)(context.Background(), "commit"))
	waitFor(t, woken, "the wake of a notification sent through the pooler")
	select {
	case <-l.Done():
		t.Fatal("the listener stopped")
	default:
	}
	require.NotContains(t, logs.String(), "level=WARN")
}
