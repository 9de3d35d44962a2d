package main

import (
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// busyAddr is a loopback address a listener of the test holds until it ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// requireNoTables requires the database of url to hold no table: nothing
// was migrated.
func requireNoTables(t *testing.T, url, why string) {
	t.Helper()
	tables, err := databasetest.Open(t, url).Migrator().GetTables()
	require.NoError(t, err)
	require.Empty(t, tables, why)
}

// serve checks every setting and binds its ports before it opens anything. A stale limit below the send bound is refused
// (exit 2, naming it) though the embedded broker's port is busy, which
// would be the first thing to fail after the migrations; nothing is
// migrated on a fresh MariaDB database and no SQLite file is created. A
// busy POSTING_HTTP_ADDR, or a busy POSTING_EMBEDDED_KAFKA_ADDR with every
// setting valid, stops serve naming it, before the migrations too.
func TestServeChecksSettingsAndPortsBeforeOpeningAnything(t *testing.T) {
	t.Parallel()
	kafkaBusy := busyAddr(t)
	for _, embedded := range []bool{false, true} {
		dataDir := t.TempDir()
		env := []string{"POSTING_RELAY_STALE_AFTER=30s", "POSTING_DATA_DIR=" + dataDir,
			"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + kafkaBusy}
		url := ""
		if !embedded {
			url = databasetest.MySQLURL(t, "startorder")
			env = append(env, "POSTING_DATABASE_URL="+url)
		}
		out, code := runBinary(t, env, "serve")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, `invalid POSTING_RELAY_STALE_AFTER="30s": must be more than 1m15s`)
		require.NotContains(t, out, "embedded kafka")
		requireEmptyDir(t, dataDir, "no SQLite file, no broker log")
		if url != "" {
			requireNoTables(t, url, "no migration ran")
		}
	}

	url := databasetest.MySQLURL(t, "startorder")
	httpBusy := busyAddr(t)
	dataDir := t.TempDir()
	out, code := runBinary(t, []string{"POSTING_DATABASE_URL=" + url, "POSTING_DATA_DIR=" + dataDir,
		"POSTING_HTTP_ADDR=" + httpBusy, "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}, "serve")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "listen on POSTING_HTTP_ADDR="+httpBusy)
	requireNoTables(t, url, "no migration ran")
	requireEmptyDir(t, dataDir, "no broker log")

	url = databasetest.MySQLURL(t, "startorder")
	dataDir = t.TempDir()
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + url, "POSTING_DATA_DIR=" + dataDir,
		"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + kafkaBusy}, "serve")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "listen on POSTING_EMBEDDED_KAFKA_ADDR="+kafkaBusy)
	requireNoTables(t, url, "no migration ran")
	requireEmptyDir(t, dataDir, "no broker log")
}

// A worker whose POSTING_WORKER_HTTP_ADDR is busy
// stops naming it before it opens anything: no migration on a fresh
// MariaDB database; on RabbitMQ the message waiting in its queue was not
// consumed (it never joined the queue's consumers); on Kafka no connection
// reached the brokers.
func TestWorkerBindsItsPortBeforeJoiningTheGroup(t *testing.T) {
	t.Parallel()
	amqpURL, exchange, queue, count := workerQueue(t)
	url := databasetest.MySQLURL(t, "startorder")
	busy := busyAddr(t)
	out, code := runBinary(t, []string{"POSTING_DATABASE_URL=" + url, "POSTING_DATA_DIR=" + filepath.Join(t.TempDir(), "d"),
		"POSTING_WORKER_HTTP_ADDR=" + busy, "POSTING_RABBITMQ_URL=" + amqpURL, "POSTING_RABBITMQ_EXCHANGE=" + exchange,
		"POSTING_WORKER_GROUP=" + queue}, "worker")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "listen on POSTING_WORKER_HTTP_ADDR="+busy)
	require.NotContains(t, out, "consumer started")
	requireNoTables(t, url, "no migration ran")
	messages, _ := count()
	require.Equal(t, 1, messages, "the queue's message was not consumed")

	// On Kafka: no connection reaches the brokers, no migration runs.
	brokers, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = brokers.Close() })
	var dialed atomic.Bool
	go func() {
		for {
			c, err := brokers.Accept()
			if err != nil {
				return
			}
			dialed.Store(true)
			_ = c.Close()
		}
	}()
	url = databasetest.MySQLURL(t, "startorder")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + url, "POSTING_DATA_DIR=" + filepath.Join(t.TempDir(), "d"),
		"POSTING_WORKER_HTTP_ADDR=" + busy, "POSTING_KAFKA_BROKERS=" + brokers.Addr().String()}, "worker")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "listen on POSTING_WORKER_HTTP_ADDR="+busy)
	requireNoTables(t, url, "no migration ran")
	require.False(t, dialed.Load(), "the worker connected to its brokers")
}
