package main

import (
	"fmt"
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
