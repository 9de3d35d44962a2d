package clocktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClockMovesOnlyByHand(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := New(t0)
	require.Equal(t, t0, c.Now())
	c.Add(time.Minute)
	require.Equal(t, t0.Add(time.Minute), c.Now())
	c.Set(t0)
	require.Equal(t, t0, c.Now())
}
