// Package turn lets a sender run one send at a time, so that two batches
// are never in flight at once and Close can wait for the send that runs.
package turn

import "time"

// Turn is the one token of a sender's sends: a send holds it while it runs.
// Make it with New.
type Turn chan struct{}

// New returns a free turn.
func New() Turn { return make(Turn, 1) }

// Within takes the turn, waiting at most d for the send that holds it. ok
// is false when d passed first; else release gives the turn back.
func (t Turn) Within(d time.Duration) (release func(), ok bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case t <- struct{}{}:
		return func() { <-t }, true
	case <-timer.C:
		return nil, false
	}
}
