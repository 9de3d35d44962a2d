// Package clocktest is the clock tests move by hand, shared by every test
// that injects a Now.
package clocktest

import (
	"sync"
	"time"
)

// T0 is the instant tests anchor their fixed times at, in UTC and with no
// sub-second part, so it survives every database's DATETIME(6) unchanged.
var T0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Clock is a clock that stands still until the test moves it. It is safe
// for concurrent use; pass its Now where a component takes a clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that reads at.
func New(at time.Time) *Clock { return &Clock{now: at} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to at.
func (c *Clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}
