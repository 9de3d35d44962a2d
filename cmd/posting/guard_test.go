package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// requireEmptyDir fails unless dir holds nothing: no SQLite file, no broker
// log, nothing a refused command should have made.
func requireEmptyDir(t *testing.T, dir, why string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Empty(t, names, why)
}

// The embedded broker takes records from anyone who reaches it, so it
// listens on loopback only: serve refuses any other address with exit 2
// naming POSTING_EMBEDDED_KAFKA_ADDR before anything is opened, and so does
// a worker told to find a serve's embedded broker there.
func TestEmbeddedBrokerListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"0.0.0.0", "[::]", "192.168.1.10", "10.1.2.3", "posting.example.com"} {
		for _, command := range []string{"serve", "worker"} {
			dataDir := t.TempDir()
			addr := host + ":19092"
			out, code := runBinary(t, []string{"POSTING_EMBEDDED_KAFKA_ADDR=" + addr, "POSTING_DATA_DIR=" + dataDir,
				"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}, command)
			require.Equal(t, 2, code, "%s %s: %s", command, addr, out)
			require.Contains(t, out, `invalid POSTING_EMBEDDED_KAFKA_ADDR="`+addr+`": not a loopback address`, command)
			require.Contains(t, out, "listens on loopback only (127.0.0.1, ::1 or localhost)", command)
			require.Contains(t, out, "set POSTING_KAFKA_BROKERS to a Kafka cluster", command)
			requireEmptyDir(t, dataDir, command+" "+addr+": nothing opened")
		}
	}
}

// workerQueue declares the worker group's queue as the worker does, bound
// to a fresh exchange, puts one message in it and returns the URL, the
// exchange, the queue and a function that counts its messages and
// consumers.
func workerQueue(t *testing.T) (url, exchange, queue string, count func() (messages, consumers int)) {
	t.Helper()
	url = rabbitmqtest.URL(t)
	exchange, queue = rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, url, exchange, queue, queue+".dead")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, rabbitmq.DeclareQueue(ctx, url, exchange, queue, 5*time.Second))
	ch := rabbitmqtest.Channel(t, url)
	require.NoError(t, ch.PublishWithContext(ctx, exchange, "1", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(`{"postId":1}`)}))
	count = func() (int, int) {
		q, err := rabbitmqtest.Channel(t, url).QueueDeclarePassive(queue, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages, q.Consumers
	}
	require.Eventually(t, func() bool { m, _ := count(); return m == 1 }, 15*time.Second, 50*time.Millisecond,
		"the message reached the worker's queue")
	return url, exchange, queue, count
}

// A worker started in a new shell of the RabbitMQ setup
// without POSTING_DATABASE_URL would take the setup's events into
// ./data/posting.db. It stops at start with exit 2 naming
// POSTING_DATABASE_URL and why, before it opens anything: no SQLite file,
// and the message waiting in its queue is still there, never consumed.
// The same for serve, and for Kafka brokers; an explicit sqlite:// URL
// starts.
func TestExternalBrokerOnTheEmbeddedSQLiteFileIsRefused(t *testing.T) {
	t.Parallel()
	url, exchange, queue, count := workerQueue(t)
	kafka := kafkatest.Start(t)
	rabbitEnv := []string{"POSTING_RABBITMQ_URL=" + url, "POSTING_RABBITMQ_EXCHANGE=" + exchange, "POSTING_WORKER_GROUP=" + queue}
	for _, c := range []struct {
		command string
		env     []string
		says    string
	}{
		{"worker", rabbitEnv, "this worker would use the embedded SQLite file %s while it reads events from RabbitMQ"},
		{"worker", []string{"POSTING_KAFKA_BROKERS=" + kafka.Addr}, "this worker would use the embedded SQLite file %s while it reads events from the Kafka brokers POSTING_KAFKA_BROKERS=" + kafka.Addr},
		{"serve", rabbitEnv, "this serve would use the embedded SQLite file %s while it sends events to RabbitMQ"},
		{"serve", []string{"POSTING_KAFKA_BROKERS=" + kafka.Addr}, "this serve would use the embedded SQLite file %s while it sends events to the Kafka brokers"},
	} {
		dataDir := t.TempDir()
		env := append([]string{"POSTING_DATABASE_URL=", "POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
			"POSTING_WORKER_HTTP_ADDR=" + freeAddr(t)}, c.env...)
		out, code := runBinary(t, env, c.command)
		require.Equal(t, 2, code, "%s %v: %s", c.command, c.env, out)
		require.Contains(t, out, "POSTING_DATABASE_URL is not set", c.command)
		require.Contains(t, out, strings.ReplaceAll(c.says, "%s", filepath.Join(dataDir, "posting.db")), c.command)
		require.Contains(t, out, "its events would go into a private SQLite file, not the database the rest of the setup uses", c.command)
		require.Contains(t, out, "an explicit sqlite:// URL is allowed", c.command)
		require.NotContains(t, out, "guest:guest", "the password is not shown")
		requireEmptyDir(t, dataDir, c.command+": nothing opened, no ./data/posting.db")
		messages, consumers := count()
		require.Equal(t, 1, messages, "%s: the queue's message was not consumed", c.command)
		require.Zero(t, consumers, c.command)
	}

	// An explicit sqlite:// URL is the operator's choice: both start, and
	// say which database and which broker they use.
	dataDir := t.TempDir()
	file := filepath.Join(dataDir, "own.db")
	addr := freeAddr(t)
	w := startBinary(t, addr, append([]string{"POSTING_DATABASE_URL=sqlite://" + file, "POSTING_DATA_DIR=" + dataDir,
		"POSTING_WORKER_HTTP_ADDR=" + addr}, rabbitEnv...), "worker")
	require.Contains(t, w.Out.String(), `msg="database ready" instance_id=`)
	require.Contains(t, w.Out.String(), "database=sqlite://"+file)
	require.Contains(t, w.Out.String(), "broker=rabbitmq broker_addr=amqp://guest:xxxxx@")
	require.NotContains(t, w.Out.String(), "guest:guest")
	w.Terminate(t)
	s := postingtest.StartFreshServe(t, "POSTING_DATABASE_URL=sqlite://"+filepath.Join(t.TempDir(), "serve.db"),
		"POSTING_KAFKA_BROKERS="+kafka.Addr)
	s.Terminate(t)
}

// groupsOf lists the consumer groups the Kafka broker at addr knows.
func groupsOf(t *testing.T, addr string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, cl)
	require.NoError(t, err)
	var names []string
	for _, g := range resp.Groups {
		names = append(names, g.Group)
	}
	return names
}

// A worker started in another folder without POSTING_DATABASE_URL, beside
// a serve on PostgreSQL that runs the embedded broker, would read that
// broker from its own ./data/posting.db. It stops at start with exit 2
// naming POSTING_DATABASE_URL and the broker's address: before it creates
// the SQLite file, and before it joins the consumer group. A stale SQLite
// file left there is refused too, after a short wait for a lease. On the
// serve's database it starts, and so does a worker in the folder of a serve
// on the embedded SQLite file, as docs/brokers.md says.
func TestWorkerOnTheEmbeddedBrokerOfAnotherDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	dbURL := databasetest.PostgresURL(t, "guard")
	serveEnv, brokerAddr, _ := embeddedServeEnv(t, dbURL, "postgres-serve")
	serve := startServe(t, serveEnv...)
	require.Contains(t, serve.Out.String(), "embedded broker lease taken")

	workerEnv := func(dataDir, group string) []string {
		return []string{"POSTING_DATABASE_URL=", "POSTING_DATA_DIR=" + dataDir, "POSTING_EMBEDDED_KAFKA_ADDR=" + brokerAddr,
			"POSTING_WORKER_HTTP_ADDR=" + freeAddr(t), "POSTING_WORKER_GROUP=" + group}
	}
	otherFolder := t.TempDir()
	out, code := runBinary(t, workerEnv(otherFolder, "refused-fresh"), "worker")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "this worker reads the embedded broker at POSTING_EMBEDDED_KAFKA_ADDR="+brokerAddr)
	require.Contains(t, out, "POSTING_DATABASE_URL is not set, so the embedded SQLite file "+filepath.Join(otherFolder, "posting.db")+") does not exist")
	require.Contains(t, out, "Set POSTING_DATABASE_URL to the database of the serve whose embedded broker listens at "+brokerAddr)
	require.NotContains(t, out, "consumer started")
	requireEmptyDir(t, otherFolder, "no ./data/posting.db was made")

	// A quick start's file left in the folder: a database, but not the
	// serve's, which recorded its broker in PostgreSQL.
	staleFolder := t.TempDir()
	out, code = runBinary(t, nil, "migrate", "--data-dir", staleFolder)
	require.Equal(t, 0, code, out)
	out, code = runBinary(t, workerEnv(staleFolder, "refused-stale"), "worker")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "this worker reads the embedded broker at POSTING_EMBEDDED_KAFKA_ADDR="+brokerAddr)
	require.Contains(t, out, "but its database sqlite://"+filepath.Join(staleFolder, "posting.db")+" holds no live lease of an embedded broker")
	require.Contains(t, out, "Set POSTING_DATABASE_URL")
	require.NotContains(t, out, "consumer started")
	require.NotContains(t, groupsOf(t, brokerAddr), "refused-fresh", "the refused workers never joined a group")
	require.NotContains(t, groupsOf(t, brokerAddr), "refused-stale")

	// On the serve's database, the worker reads its broker.
	env := append(workerEnv(t.TempDir(), "right-database"), "POSTING_DATABASE_URL="+dbURL)
	w := startBinary(t, strings.TrimPrefix(env[3], "POSTING_WORKER_HTTP_ADDR="), env, "worker")
	// Ready before its log reaches Out: the output is copied from a pipe.
	require.Eventually(t, func() bool { return strings.Contains(w.Out.String(), "broker=kafka broker_addr="+brokerAddr) },
		10*time.Second, 20*time.Millisecond, "the worker names the broker it reads")
	require.Eventually(t, func() bool { return slices.Contains(groupsOf(t, brokerAddr), "right-database") },
		30*time.Second, 100*time.Millisecond, "the worker joined its group")
	w.Terminate(t)

	// docs/brokers.md: a worker without brokers reads the embedded broker
	// of a serve running in the same folder, on the same SQLite file.
	folder := t.TempDir()
	sqliteBroker := freeAddr(t)
	startServe(t, "POSTING_DATABASE_URL=", "POSTING_DATA_DIR="+folder, "POSTING_HTTP_ADDR="+freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR="+sqliteBroker)
	addr := freeAddr(t)
	w = startBinary(t, addr, []string{"POSTING_DATABASE_URL=", "POSTING_DATA_DIR=" + folder, "POSTING_EMBEDDED_KAFKA_ADDR=" + sqliteBroker,
		"POSTING_WORKER_HTTP_ADDR=" + addr}, "worker")
	require.Contains(t, w.Out.String(), "broker=kafka broker_addr="+sqliteBroker)
	w.Terminate(t)
}

// A worker logs its database and its Kafka brokers at start, as serve
// does; migrate logs its database before it applies anything.
func TestWorkerAndMigrateLogTheirDatabase(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	file := filepath.Join(t.TempDir(), "w.db")
	out, code := runBinary(t, []string{"POSTING_DATABASE_URL=sqlite://" + file}, "migrate")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `msg="applying migrations" .*database=sqlite://`+file, out)

	addr := freeAddr(t)
	w := startBinary(t, addr, []string{"POSTING_DATABASE_URL=sqlite://" + file, "POSTING_KAFKA_BROKERS=" + b.Addr,
		"POSTING_WORKER_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir()}, "worker")
	require.Regexp(t, `msg="database ready" .*database=sqlite://`+file, w.Out.String())
	require.Contains(t, w.Out.String(), "broker=kafka broker_addr="+b.Addr)
	w.Terminate(t)
}

// embeddedServeEnv is a serve with its own embedded broker on databaseURL.
func embeddedServeEnv(t *testing.T, databaseURL, instance string) (env []string, brokerAddr, dataDir string) {
	brokerAddr, dataDir = freeAddr(t), t.TempDir()
	return []string{"POSTING_DATABASE_URL=" + databaseURL, "POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + brokerAddr, "POSTING_INSTANCE_ID=" + instance}, brokerAddr, dataDir
}

// One embedded broker per database: a second serve that would start its
// own on a MariaDB database another serve's embedded broker serves stops
// with exit 2, naming the first (its address and instance id) and
// POSTING_KAFKA_BROKERS, before its broker or its API listen; pointed at
// the first one's broker as told, it starts. The first killed with kill -9,
// its restart takes the lease over at once (its broker no longer answers)
// rather than after the expiry; a clean stop releases the lease.
func TestSecondEmbeddedBrokerOnOneDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	dbURL := databasetest.MySQLURL(t, "guard")
	firstEnv, firstBroker, _ := embeddedServeEnv(t, dbURL, "first-serve")
	first := startServe(t, firstEnv...)
	require.Contains(t, first.Out.String(), "embedded broker lease taken")

	secondEnv, _, secondDir := embeddedServeEnv(t, dbURL, "second-serve")
	out, code := runBinary(t, secondEnv, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "serve first-serve already runs the embedded broker of this database at "+firstBroker)
	require.Contains(t, out, "a second embedded broker would split the database's events between two logs")
	require.Contains(t, out, "Point this serve at that broker with POSTING_KAFKA_BROKERS="+firstBroker)
	require.NotContains(t, out, "embedded kafka broker started")
	require.NotContains(t, out, "http api listening")
	require.NoDirExists(t, filepath.Join(secondDir, "kafka"), "the second broker never started")

	// As the refusal says: the second serve on the first one's broker.
	second := startServe(t, append(secondEnv, "POSTING_KAFKA_BROKERS="+firstBroker)...)
	post := createPost(t, second.HTTP, time.Now().Add(time.Hour))
	require.Equal(t, "RESERVED", getPost(t, first.HTTP, post["id"])["status"], "one database")
	records := kafkatest.ReadTopic(t, firstBroker, "posting-events", 1, 30*time.Second)
	require.Equal(t, []string{"POSTING_EVENT"}, eventsOf(records, post["id"]), "and one broker")
	second.Terminate(t)

	// kill -9: no release, the lease runs on; the restart on the same data
	// dir and address finds nothing answering there and takes it over.
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	<-first.Done
	db := databasetest.Open(t, dbURL)
	lease, held, err := database.ReadLease(context.Background(), db.DB, embeddedBrokerLease)
	require.NoError(t, err)
	require.True(t, held, "kill -9 left the lease held")
	require.True(t, strings.HasPrefix(lease.Holder, "first-serve#"), lease.Holder)
	started := time.Now()
	restarted := startServe(t, firstEnv...)
	require.Less(t, time.Since(started), brokerLeaseTTL, "the restart did not wait for the lease to expire")
	require.Contains(t, restarted.Out.String(), "took over the embedded broker's lease of a serve whose broker no longer answers")
	require.Equal(t, "RESERVED", getPost(t, restarted.HTTP, post["id"])["status"])
	after, held, err := database.ReadLease(context.Background(), db.DB, embeddedBrokerLease)
	require.NoError(t, err)
	require.True(t, held)
	require.NotEqual(t, lease.Holder, after.Holder, "a new holder: this run's token")

	restarted.Terminate(t)
	_, held, err = database.ReadLease(context.Background(), db.DB, embeddedBrokerLease)
	require.NoError(t, err)
	require.False(t, held, "a clean stop releases the lease")
}

// A lease held by a serve on another host, or by one whose broker is still
// starting, is not taken over though nothing answers here at its address:
// the embedded broker listens on its own host's loopback, so only the
// expiry tells that such a holder is gone. The refusal says when it is.
func TestEmbeddedBrokerLeaseOfAnotherHostIsWaitedOut(t *testing.T) {
	t.Parallel()
	dbURL := databasetest.MySQLURL(t, "guardhost")
	db := databasetest.Open(t, dbURL)
	databasetest.Migrate(t, db)
	silent := freeAddr(t) // nothing listens there
	for _, info := range []brokerInfo{
		{addr: silent, host: "another-host"},
		{addr: silent, host: thisHost(), net: thisNetwork(), starting: true},
	} {
		held, ok, err := database.AcquireLease(context.Background(), db.DB, embeddedBrokerLease, "elsewhere#00000000", info.String(), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		env, _, dataDir := embeddedServeEnv(t, dbURL, "here")
		out, code := runBinary(t, env, "serve")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "serve elsewhere already runs the embedded broker of this database at "+silent+" on host "+info.host)
		require.Contains(t, out, "its lease expires at "+held.ExpiresAt.UTC().Format(time.RFC3339))
		if !info.starting {
			require.Contains(t, out, "That broker listens on the loopback of another-host only: run this serve there with POSTING_KAFKA_BROKERS="+silent)
		}
		require.NoDirExists(t, filepath.Join(dataDir, "kafka"))
		lease, _, err := database.ReadLease(context.Background(), db.DB, embeddedBrokerLease)
		require.NoError(t, err)
		require.Equal(t, "elsewhere#00000000", lease.Holder, "not taken over")
		require.NoError(t, database.ReleaseLease(context.Background(), db.DB, embeddedBrokerLease, lease.Holder))
	}
}

// The lease's renewals extend it by the database clock and record where the
// broker listens once it does; a renewal of a lease another serve took is
// an error that names it, and a stop releases only a lease still held.
func TestBrokerLeaseRenewsAndSaysWhenLost(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		s := &settings{InstanceID: "renew#test", EmbeddedKafkaAddr: "127.0.0.1:0"}
		st := &startstop.Stack{}
		l, err := takeBrokerLease(s, db, nil, slog.New(slog.DiscardHandler), st)
		require.NoError(t, err)
		taken, held, err := database.ReadLease(ctx, db.DB, embeddedBrokerLease)
		require.NoError(t, err)
		require.True(t, held)
		require.True(t, strings.HasPrefix(taken.Holder, "renew#test#"), taken.Holder)
		require.Equal(t, brokerInfo{addr: "127.0.0.1:0", host: thisHost(), net: thisNetwork(), starting: true}.String(), taken.Info,
			"starting: not taken over while its broker is not up yet")

		time.Sleep(5 * time.Millisecond) // SQLite's clock counts milliseconds: a renewal in the same one moves nothing
		require.NoError(t, l.keep(st, "127.0.0.1:9999"))
		kept, _, err := database.ReadLease(ctx, db.DB, embeddedBrokerLease)
		require.NoError(t, err)
		require.Equal(t, brokerInfo{addr: "127.0.0.1:9999", host: thisHost(), net: thisNetwork()}.String(), kept.Info, "the address it listens on")
		require.True(t, kept.ExpiresAt.After(taken.ExpiresAt), "renewed")
		r := &brokerLeaseRenewer{lease: l}
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, r.runOnce(ctx))
		again, _, err := database.ReadLease(ctx, db.DB, embeddedBrokerLease)
		require.NoError(t, err)
		require.True(t, again.ExpiresAt.After(kept.ExpiresAt), "renewed again")

		require.NoError(t, database.ReleaseLease(ctx, db.DB, embeddedBrokerLease, l.holder))
		_, ok, err := database.AcquireLease(ctx, db.DB, embeddedBrokerLease, "thief#1", "127.0.0.1:1 on elsewhere", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.ErrorContains(t, r.runOnce(ctx), "lease embedded-broker lost to thief#1 (127.0.0.1:1 on elsewhere)")
		st.Stop()
		after, held, err := database.ReadLease(ctx, db.DB, embeddedBrokerLease)
		require.NoError(t, err)
		require.True(t, held)
		require.Equal(t, "thief#1", after.Holder, "the stop released only its own lease")
	})
}

// A holder whose host name is this host's but whose network is another
// (a cloned machine, or a replica of a container given one hostname) is
// waited out, not taken over: nothing answering at its address on this
// loopback says nothing of its broker, which listens on another loopback.
// Taken over, two embedded brokers served the database.
func TestEmbeddedBrokerLeaseOfASameNamedHostElsewhereIsWaitedOut(t *testing.T) {
	t.Parallel()
	if thisNetwork() == "" {
		t.Skip("no network namespace to tell apart on this system")
	}
	dbURL := databasetest.MySQLURL(t, "guardnet")
	db := databasetest.Open(t, dbURL)
	databasetest.Migrate(t, db)
	silent := freeAddr(t) // nothing listens there, here
	for _, info := range []brokerInfo{
		{addr: silent, host: thisHost(), net: "00000000:1"},
		{addr: silent, host: thisHost()}, // written without a network
	} {
		held, ok, err := database.AcquireLease(context.Background(), db.DB, embeddedBrokerLease, "twin#00000000", info.String(), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		env, _, dataDir := embeddedServeEnv(t, dbURL, "here")
		out, code := runBinary(t, env, "serve")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, "serve twin already runs the embedded broker of this database at "+silent+" on host "+thisHost())
		require.Contains(t, out, "its lease expires at "+held.ExpiresAt.UTC().Format(time.RFC3339))
		require.NoDirExists(t, filepath.Join(dataDir, "kafka"))
		lease, _, err := database.ReadLease(context.Background(), db.DB, embeddedBrokerLease)
		require.NoError(t, err)
		require.Equal(t, "twin#00000000", lease.Holder, "not taken over")
		require.NoError(t, database.ReleaseLease(context.Background(), db.DB, embeddedBrokerLease, lease.Holder))
	}
}

// The lease's info reads back as written, with or without a network.
func TestBrokerInfoRoundTrips(t *testing.T) {
	t.Parallel()
	for _, i := range []brokerInfo{
		{addr: "127.0.0.1:9092", host: "h"},
		{addr: "127.0.0.1:9092", host: "h", net: "f07a92cc:4026531833"},
		{addr: "[::1]:9092", host: "h", net: "f07a92cc:4026531833", starting: true},
		{addr: "127.0.0.1:9092", host: "h", starting: true},
	} {
		got, ok := parseBrokerInfo(i.String())
		require.True(t, ok, i.String())
		require.Equal(t, i, got, i.String())
	}
}

// The embedded broker listens on its own host's loopback, so a live lease
// names the broker a worker reads only when it was taken on the worker's
// host and network: a worker elsewhere that finds the same loopback
// address in its database's lease would read another broker there (that of
// another database's serve) and is refused, naming the broker's host.
func TestWorkerOnALoopbackBrokerOfAnotherHostIsRefused(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	addr := "127.0.0.1:19092"
	s := &settings{EmbeddedKafkaAddr: addr}
	log := slog.New(slog.DiscardHandler)
	here := brokerInfo{addr: "localhost:19092", host: thisHost(), net: thisNetwork()}
	others := []brokerInfo{{addr: addr, host: "another-host"}, {addr: addr, host: "another-host", net: here.net}}
	if here.net != "" {
		others = append(others, brokerInfo{addr: addr, host: here.host, net: "00000000:1"})
	}
	for _, info := range others {
		_, ok, err := database.AcquireLease(context.Background(), db.DB, embeddedBrokerLease, "elsewhere#00000000", info.String(), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		err = requireEmbeddedBrokerLease(context.Background(), s, db, log)
		require.Errorf(t, err, "a lease of %s", info)
		var usage usageError
		require.ErrorAs(t, err, &usage)
		require.Contains(t, err.Error(), "POSTING_DATABASE_URL")
		require.Contains(t, err.Error(), "on host "+info.host)
		require.NoError(t, database.ReleaseLease(context.Background(), db.DB, embeddedBrokerLease, "elsewhere#00000000"))
	}

	// This host's lease, with the address written another way, is the broker.
	_, ok, err := database.AcquireLease(context.Background(), db.DB, embeddedBrokerLease, "here#00000000", here.String(), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, requireEmbeddedBrokerLease(context.Background(), s, db, log))
}
