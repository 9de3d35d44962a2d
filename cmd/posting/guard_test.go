package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/kafka/kafkatest"
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
