package main

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// A stale limit that a healthy Kafka send and the write of its results could
// outlast is a bad setting: serve exits 2 naming it, its value and the
// minimum, which the relay learns from the producer (through the metrics
// wrapper).
func TestServeRefusesAStaleLimitBelowTheSendBound(t *testing.T) {
	t.Parallel()
	bin, err := buildBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "POSTING_RELAY_STALE_AFTER=11s", "POSTING_DATA_DIR="+t.TempDir(),
		"POSTING_HTTP_ADDR="+freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR="+freeAddr(t))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 2, cmd.ProcessState.ExitCode(), string(out))
	require.Contains(t, string(out), `POSTING_RELAY_STALE_AFTER="11s"`)
	require.Contains(t, string(out), "must be more than 1m15s", "the minimum: (30s send + 30s write) and a quarter")
}
