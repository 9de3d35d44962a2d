package main

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// POSTING_WORKER_CONCURRENCY reaches the worker's configuration, and values
// out of 0..256 stop serve and worker with exit status 2.
func TestWorkerConcurrencySetting(t *testing.T) {
	t.Parallel()
	s := settings{WorkerGroup: "g", WorkerConcurrency: 7}
	require.Equal(t, 7, s.workerConfig(nil, nil, nil).Concurrency)
	for _, cmd := range []string{"serve", "worker"} {
		for _, v := range []string{"-1", "257", "many"} {
			out, code := runBinary(t, []string{"POSTING_WORKER_CONCURRENCY=" + v, "POSTING_DATA_DIR=" + t.TempDir(),
				"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}, cmd)
			require.Equal(t, 2, code, "%s %s: %s", cmd, v, out)
			require.Contains(t, out, fmt.Sprintf("POSTING_WORKER_CONCURRENCY=%q", v), cmd)
		}
	}
}

// Without POSTING_KAFKA_BROKERS, `posting worker` reads the embedded broker
// of a running serve at POSTING_EMBEDDED_KAFKA_ADDR; a bad address there is
// that setting's fault, and the message must name it, not
// POSTING_KAFKA_BROKERS, which the operator never set.
func TestWorkerBadEmbeddedAddrNamesItsSetting(t *testing.T) {
	t.Setenv("POSTING_KAFKA_BROKERS", "")
	t.Setenv("POSTING_EMBEDDED_KAFKA_ADDR", "nonsense")
	_, errOut, code := runCLI(t, "worker", "--data-dir", t.TempDir(), "--worker-http-addr", "")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `invalid POSTING_EMBEDDED_KAFKA_ADDR="nonsense"`)
	require.NotContains(t, errOut, "POSTING_KAFKA_BROKERS")

	// With brokers set, a bad one is still named as POSTING_KAFKA_BROKERS.
	t.Setenv("POSTING_KAFKA_BROKERS", "nohostport")
	_, errOut, code = runCLI(t, "worker", "--data-dir", t.TempDir(), "--worker-http-addr", "")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `invalid POSTING_KAFKA_BROKERS="nohostport"`)
}

// POSTING_WORKER_CONCURRENCY=0 is the worker's default (README "Settings"),
// so a refusal must not say the setting wants 1..256 only, as it did before
// the settings table: "want 1..256, or 0 for the default".
func TestWorkerConcurrencyRefusalSaysZeroIsTheDefault(t *testing.T) {
	for _, cmd := range []string{"serve", "worker"} {
		_, errOut, code := runCLI(t, cmd, "--data-dir", t.TempDir(), "--worker-concurrency", "257")
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, `invalid POSTING_WORKER_CONCURRENCY="257"`, cmd)
		require.Contains(t, errOut, "or 0 for the worker's default", cmd)
	}
}

// A pool setting out of its limits stops every command that opens the
// database before it opens it, naming the setting.
func TestDatabasePoolSettingsOutOfLimitsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--database-max-conns", "-1"}, `invalid POSTING_DATABASE_MAX_CONNS="-1"`},
		{[]string{"--database-max-conns", "1001"}, `invalid POSTING_DATABASE_MAX_CONNS="1001"`},
		{[]string{"--database-max-conns", "4", "--database-max-idle-conns", "5"}, `invalid POSTING_DATABASE_MAX_IDLE_CONNS="5"`},
	} {
		for _, cmd := range []string{"serve", "worker", "migrate"} {
			dir := t.TempDir()
			_, errOut, code := runCLI(t, append([]string{cmd, "--data-dir", dir}, tc.args...)...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, tc.msg, cmd)
			require.NoFileExists(t, filepath.Join(dir, "posting.db"), "a refused setting opened the database")
		}
	}
}
