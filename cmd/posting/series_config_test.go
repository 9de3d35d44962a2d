package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// POSTING_SERIES_HORIZON outside 1h..90 days, or not longer than the
// reservation lead, stops serve at start with exit status 2, naming the
// setting and its value, before anything is created.
func TestSeriesHorizonOutsideItsBoundsStopsServe(t *testing.T) {
	for _, c := range []struct{ value, lead, shown, reason string }{
		{"59m", "", "59m0s", "want 1h0m0s..90 days"},
		{"2161h", "", "2161h0m0s", "want 1h0m0s..90 days"},
		{"1week", "", "1week", `unknown unit "week"`},
		{"2h", "3h", "2h0m0s", "must be longer than POSTING_RESERVATION_LEAD (3h0m0s)"},
	} {
		t.Setenv("POSTING_SERIES_HORIZON", c.value)
		t.Setenv("POSTING_RESERVATION_LEAD", c.lead)
		if c.lead == "" {
			require.NoError(t, os.Unsetenv("POSTING_RESERVATION_LEAD"))
		}
		dir := t.TempDir()
		_, errOut, code := runCLI(t, "serve", "--data-dir", dir)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, `invalid POSTING_SERIES_HORIZON="`+c.shown+`"`, c.value)
		require.Contains(t, errOut, c.reason, c.value)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "nothing created in the data dir: %s", c.value)
	}
}
