// Package relay moves outbox rows to a sender: it recovers stale claims,
// claims due rows in batches, sends them synchronously and records each result
// under the claim's version.
package relay

import (
	"context"
	"errors"
	"time"

	"github.com/postingsvc/posting/event"
)

// ErrUnavailable marks a send that failed because the cluster could not be
// reached (no broker, connection refused, timeouts, leader elections). Such a
// failure is not the message's fault: the relay backs off and does not count
// it as one of the message's attempts.
var ErrUnavailable = errors.New("broker unavailable")

// Sender sends a batch of messages synchronously and tells each result. It
// gets each outbox row as its transport-neutral message (Envelope), built
// once by the relay: a sender maps its headers to its binding and writes
// its key and value as they are.
type Sender interface {
	// Send sends msgs, each under its key, and returns one error per
	// message in the same order: nil when the broker acknowledged it, an
	// error wrapping ErrUnavailable when the cluster could not be reached,
	// and any other error when the broker rejected that message. It returns
	// only when every message has an outcome.
	Send(ctx context.Context, msgs []event.Message) []error
}

// Pinger is a Sender that can tell cheaply whether the cluster answers
// (kafka.Producer can). While the broker is unreachable the relay waits up
// to OutageBackoffMax between polls; with a Pinger it asks every Interval
// meanwhile and polls as soon as the broker answers, so events flow again
// within an interval of its return instead of up to a whole backoff later.
type Pinger interface {
	// Ping returns nil when the cluster answers.
	Ping(ctx context.Context) error
}

// SendBounder is a Sender that knows the longest one Send can take
// (kafka.Producer: its SendTimeout). The relay refuses a StaleAfter that a
// healthy but slow send and the write of its results could outlast: another
// instance would recover the claim while it is still being sent, and send
// the rows again.
type SendBounder interface {
	// SendBound is the longest one Send takes; 0 means unknown.
	SendBound() time.Duration
}

// UnansweredError is a send that ended without an answer from the broker
// (the sender's timeout passed, or ctx ended, while the request could still
// be on its way): the message may yet be written, late. It is unavailable
// (it wraps ErrUnavailable, no attempt is spent), but the relay does not
// hand its row back at once: another instance would send the event, and
// the next of its post, before the late copy lands. The row stays
// PROCESSING until Settled is closed, then it is released.
type UnansweredError struct {
	// Err says why; it wraps ErrUnavailable.
	Err error
	// Settled is closed once the request can no longer reach the broker:
	// the sender's own bound on it has passed and its connection is torn
	// down. A sender closes it within its SendBound of the error, so that a
	// relay that dies meanwhile leaves the row to stale recovery, which the
	// stale limit (checked against SendBound at start) keeps behind it.
	Settled <-chan struct{}
}

func (e *UnansweredError) Error() string {
	return e.Err.Error() + " (no answer: held until the request is torn down)"
}

// Unwrap returns Err.
func (e *UnansweredError) Unwrap() error { return e.Err }

// FailAll sets every entry of errs to err and returns errs: a Send's answer
// when the whole batch failed the same way.
func FailAll(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}
