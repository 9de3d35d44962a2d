package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A stale limit that a healthy Kafka send and the write of its results could
// outlast is a bad setting: serve exits 2 naming it, its value and the
// minimum, which the relay learns from the producer (through the metrics
// wrapper).
func TestServeRefusesAStaleLimitBelowTheSendBound(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_RELAY_STALE_AFTER=11s", "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `POSTING_RELAY_STALE_AFTER="11s"`)
	require.Contains(t, out, "must be more than 1m15s", "the minimum: (30s send + 30s write) and a quarter")
}
