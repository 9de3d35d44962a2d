// Package relaytest holds the fake relay.Sender that tests of the relay and of
// what drives it share. It does not import relay, so the relay's own tests
// can use it.
package relaytest

import (
	"context"
	"sync"
	"time"

	"github.com/postingsvc/posting/event"
)

// Sender is a configurable fake relay.Sender: by default it acknowledges
// every message at once. It records what it acknowledged, in order, and how
// often each event was acknowledged. It is safe for concurrent use; every
// setter may be called while a relay runs.
type Sender struct {
	mu      sync.Mutex
	down    error                     // while set, every message gets it
	answers map[string][]error        // per key, consumed one per attempt; nil = ack
	reject  func(event.Message) error // a non-nil answer rejects the message
	hold    chan struct{}             // while set, Send waits for it to close
	entered chan struct{}             // told, without blocking, at each call
	before  func()                    // run once by the next Send
	pause   time.Duration             // each Send sleeps this long first
	bound   time.Duration             // SendBound
	calls   int
	sent    []event.Message // acknowledged, in order
	sends   map[string]int  // acknowledgements by event id
}

// NewSender returns a Sender that acknowledges everything.
func NewSender() *Sender {
	return &Sender{answers: map[string][]error{}, sends: map[string]int{}, entered: make(chan struct{}, 1)}
}

// Send answers each message: err of SetDown while down, else the next
// queued answer of its key (Answer), else the Reject function's answer,
// else an acknowledgement.
func (s *Sender) Send(_ context.Context, msgs []event.Message) []error {
	s.mu.Lock()
	hold, before, pause := s.hold, s.before, s.pause
	s.before = nil
	s.calls++
	s.mu.Unlock()
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if before != nil {
		before()
	}
	if hold != nil {
		<-hold
	}
	time.Sleep(pause) // a send that takes a while: claims stay in flight
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if s.down != nil {
			errs[i] = s.down
			continue
		}
		if q := s.answers[m.Key]; len(q) > 0 {
			errs[i], s.answers[m.Key] = q[0], q[1:]
		} else if s.reject != nil {
			errs[i] = s.reject(m)
		}
		if errs[i] == nil {
			s.sent = append(s.sent, m)
			s.sends[m.EventID()]++
		}
	}
	return errs
}

// SendBound is what SetBound set; 0 (the default) means unknown, as for a
// sender that is no relay.SendBounder.
func (s *Sender) SendBound() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// SetDown makes every message of later sends fail with err, and Ping (see
// Pinging) return it; nil brings the broker back.
func (s *Sender) SetDown(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = err
}

// Answer queues answers for the messages of key, one per attempt.
func (s *Sender) Answer(key string, errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[key] = append(s.answers[key], errs...)
}

// Reject sets what answers each message with no queued answer: a non-nil
// error rejects it. nil acknowledges everything again.
func (s *Sender) Reject(f func(event.Message) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject = f
}

// Hold makes sends wait until release is called (release may be called
// more than once), so that a test acts while a send is in flight.
func (s *Sender) Hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == ch {
				s.hold = nil
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Entered receives a value when a send has begun (buffered: at most one
// waits).
func (s *Sender) Entered() <-chan struct{} { return s.entered }

// BeforeNextSend runs f at the start of the next send only, before it
// answers, e.g. to cut the database off between claim and send.
func (s *Sender) BeforeNextSend(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = f
}

// SetPause makes each send take d before it answers.
func (s *Sender) SetPause(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pause = d
}

// SetBound sets what SendBound reports.
func (s *Sender) SetBound(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bound = d
}

// Calls is how many sends began.
func (s *Sender) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// SentIDs are the outbox ids acknowledged (the messages' sequences), in
// order.
func (s *Sender) SentIDs() []int64 { return sent(s, event.Message.Sequence) }

// SentEventIDs are the event ids acknowledged, in order.
func (s *Sender) SentEventIDs() []string {
	return sent(s, event.Message.EventID)
}

func sent[T any](s *Sender, field func(event.Message) T) []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []T
	for _, m := range s.sent {
		out = append(out, field(m))
	}
	return out
}

// Sends is how many times the event was acknowledged.
func (s *Sender) Sends(eventID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends[eventID]
}

// Pinging returns s as a relay.Pinger too: Ping answers SetDown's error.
// A bare *Sender is no Pinger, as a sender that cannot be pinged.
func (s *Sender) Pinging() *PingingSender { return &PingingSender{s} }

// PingingSender is a Sender the relay can ping.
type PingingSender struct{ *Sender }

// Ping returns SetDown's error: nil while the broker is up.
func (p *PingingSender) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}
