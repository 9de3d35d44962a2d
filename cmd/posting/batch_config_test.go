package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// POSTING_API_BATCH_CONCURRENCY outside 1..1000 stops serve at start with
// exit status 2, naming the setting and its value, before anything is
// created.
func TestBatchConcurrencyOutsideItsBoundsStopsServe(t *testing.T) {
	for _, c := range []struct{ value, reason string }{
		{"0", "want 1..1000"},
		{"1001", "want 1..1000"},
		{"two", "invalid syntax"},
	} {
		t.Setenv("POSTING_API_BATCH_CONCURRENCY", c.value)
		dir := t.TempDir()
		_, errOut, code := runCLI(t, "serve", "--data-dir", dir)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "POSTING_API_BATCH_CONCURRENCY", c.value)
		require.Contains(t, errOut, c.reason, c.value)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "nothing created in the data dir: %s", c.value)
	}
}
