package spike

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAwaitPublishedCountsOnceMoreWhenTheTimeoutEndsAPause: the posts were
// all published during the pause that the timeout cut short; the count after
// the timeout sees them, and the spike finishes instead of timing out.
func TestAwaitPublishedCountsOnceMoreWhenTheTimeoutEndsAPause(t *testing.T) {
	const posts = 10
	var calls atomic.Int32
	count := func(ctx context.Context) (progress, error) {
		if calls.Add(1) == 1 {
			return progress{Reserved: posts}, nil
		}
		require.NoError(t, ctx.Err(), "the last count runs on a live context")
		return progress{Published: posts, Recorded: posts}, nil
	}
	// The first pause (50 ms at least) outlasts the timeout.
	res, err := awaitPublished(context.Background(), 10*time.Millisecond, time.Now(), count, posts)
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "one count before the timeout, one after")
	require.Positive(t, res.AllWorking)
	require.Positive(t, res.AllRecorded)
}

// TestAwaitPublishedTimesOutWithTheLastCount: posts that stay unpublished
// past the timeout end the wait with ErrTimeout, naming the last count.
func TestAwaitPublishedTimesOutWithTheLastCount(t *testing.T) {
	var calls atomic.Int32
	count := func(context.Context) (progress, error) {
		return progress{Published: int64(calls.Add(1))}, nil
	}
	_, err := awaitPublished(context.Background(), 10*time.Millisecond, time.Now(), count, 10)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "2 of 10 posts published")
}

// TestAwaitPublishedStopsWithItsContext: a caller's cancelled context ends
// the wait without a last count, and is not reported as a timeout.
func TestAwaitPublishedStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	count := func(context.Context) (progress, error) {
		calls.Add(1)
		cancel()
		return progress{}, nil
	}
	_, err := awaitPublished(ctx, time.Minute, time.Now(), count, 10)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, ErrTimeout), "a stop is not a timeout: %v", err)
	require.EqualValues(t, 1, calls.Load())
}
