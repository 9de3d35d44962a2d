package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// POSTING_IDEMPOTENCY_RETENTION outside 1m..720h (or no duration at all)
// stops serve at start with exit status 2, naming the setting, its value
// and the bounds, before anything is created.
func TestIdempotencyRetentionOutsideItsBoundsStopsServe(t *testing.T) {
	for _, c := range []struct{ value, shown, reason string }{
		{"59s", "59s", "want 1m0s..720h0m0s"},
		{"721h", "721h0m0s", "want 1m0s..720h0m0s"},
		{"0s", "0s", "want 1m0s..720h0m0s"},
		{"1day", "1day", `unknown unit "day"`},
	} {
		t.Setenv("POSTING_IDEMPOTENCY_RETENTION", c.value)
		dir := t.TempDir()
		_, errOut, code := runCLI(t, "serve", "--data-dir", dir)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, `invalid POSTING_IDEMPOTENCY_RETENTION="`+c.shown+`"`, c.value)
		require.Contains(t, errOut, c.reason, c.value)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "nothing created in the data dir: %s", c.value)
	}
}
