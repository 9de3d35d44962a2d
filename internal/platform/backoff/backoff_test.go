package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	t.Parallel()
	var got []time.Duration
	for n := range 6 {
		got = append(got, Delay(time.Second, 5*time.Second, n))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}, got)
}

func TestNextIsJitteredIntoTheUpperHalf(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	for i, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		d := b.Next()
		require.GreaterOrEqual(t, d, want/2, "pause %d", i)
		require.LessOrEqual(t, d, want, "pause %d", i)
	}
	require.Equal(t, 6, b.Failures())
	b.Reset()
	require.LessOrEqual(t, b.Next(), 100*time.Millisecond, "starts over")
}

func TestExactHasNoJitter(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 10 * time.Millisecond, Max: 30 * time.Millisecond, Exact: true}
	require.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond},
		[]time.Duration{b.Next(), b.Next(), b.Next()})
}

func TestSleep(t *testing.T) {
	t.Parallel()
	require.True(t, Sleep(context.Background(), time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	require.False(t, Sleep(ctx, time.Hour))
	require.False(t, Sleep(ctx, 0), "no pause, but stopped")
	require.True(t, Sleep(context.Background(), 0))
	require.Less(t, time.Since(start), time.Minute)
}
