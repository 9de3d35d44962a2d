package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The write path's settings outside their bounds stop serve at start with
// exit status 2, naming the setting and its value, before anything is
// created.
func TestWriteSettingsOutsideTheirBoundsStopServe(t *testing.T) {
	for _, c := range []struct{ name, value, reason string }{
		{"POSTING_API_BATCH_CONCURRENCY", "0", "want 1..1000"},
		{"POSTING_API_BATCH_CONCURRENCY", "1001", "want 1..1000"},
		{"POSTING_API_BATCH_CONCURRENCY", "two", "invalid syntax"},
		{"POSTING_API_GROUP_SIZE", "0", "want 1..1000"},
		{"POSTING_API_GROUP_SIZE", "1001", "want 1..1000"},
		{"POSTING_API_GROUP_WAIT", "-1ms", "want 0..100ms"},
		{"POSTING_API_GROUP_WAIT", "101ms", "want 0..100ms"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			dir := t.TempDir()
			_, errOut, code := runCLI(t, "serve", "--data-dir", dir)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.name)
			require.Contains(t, errOut, c.reason)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing created in the data dir")
		})
	}
}
