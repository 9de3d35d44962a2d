// Package backoff is the one way the tree pauses between attempts: how long
// (Backoff) and waiting it out unless the caller is stopped (Sleep).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/postingsvc/posting/internal/platform/config"
)

// Backoff is a pause that doubles with every failure in a row, from Base
// up to Max. The zero value of the counter is ready; Base and Max must be
// positive, Max at least Base. Not safe for concurrent use: each loop holds
// its own.
type Backoff struct {
	// Base is the first pause.
	Base time.Duration
	// Max caps the pause.
	Max time.Duration
	// Exact turns the jitter off: each pause is exactly Base doubled per
	// earlier failure. For a pause that spaces one loop's own attempts,
	// where others coming back at the same moment is no concern.
	Exact bool

	failures int
}

// CheckRetry reports RetryBase and RetryMax settings that cannot make a
// Backoff (Base positive, Max at least Base) as a *config.Error naming
// prefix+"RetryBase" or prefix+"RetryMax": the check of every Config whose
// retries back off without limits of their own (relay, worker, wakeup).
func CheckRetry(prefix string, base, max time.Duration) error {
	switch {
	case base <= 0:
		return config.Invalid(prefix+"RetryBase", base, "must be positive")
	case max < base:
		return config.Invalid(prefix+"RetryMax", max, "below the retry base %s", base)
	}
	return nil
}

// Next counts one more failure and returns the pause after it: Base
// doubled per earlier failure in a row, capped at Max, jittered into
// [d/2, d] unless Exact.
func (b *Backoff) Next() time.Duration {
	d := Delay(b.Base, b.Max, b.failures)
	if !b.Exact {
		d = Jitter(d)
	}
	b.failures++
	return d
}

// Failures is the number of failures counted since the last Reset.
func (b *Backoff) Failures() int { return b.failures }

// Reset starts over from Base: the last attempt succeeded.
func (b *Backoff) Reset() { b.failures = 0 }

// Delay is the pause after n earlier failures, without jitter: base
// doubled n times, capped at max. For callers that keep the count
// elsewhere (a row's retry count).
func Delay(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Jitter returns a random pause in [d/2, d], so that the parts that failed
// together do not all come back at once.
func Jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits d, or until ctx ends, and reports whether d passed. With d
// of zero or less it only reports whether ctx is still going, so a loop
// that goes on at once still stops when asked.
func Sleep(ctx context.Context, d time.Duration) bool { return SleepOrWake(ctx, d, nil) }

// SleepOrWake is Sleep that also ends early, reporting true, when wake
// receives: a loop that pauses between polls and can be told there is work
// (a nil wake never does).
func SleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	_, ok := SleepOrWoken(ctx, d, wake)
	return ok
}

// SleepOrWoken is SleepOrWake that also tells whether the wake ended the
// pause.
func SleepOrWoken(ctx context.Context, d time.Duration, wake <-chan struct{}) (woken, ok bool) {
	if d <= 0 {
		return false, ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-wake:
		return true, true
	case <-t.C:
		return false, true
	}
}
