package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

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
