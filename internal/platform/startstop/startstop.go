// Package startstop is the one way a long-running part of the service starts
// and stops: Start begins one goroutine, Stop waits for it.
package startstop

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

var (
	// ErrStarted is StartInit's error for a second Start.
	ErrStarted = errors.New("already started")
	// ErrStopped is StartInit's error for a Start after Stop: a stopped
	// service does not start again, and a Stop before Start keeps it from
	// starting later.
	ErrStopped = errors.New("already stopped")
	// ErrStop is the cause of the context StartInit returned when it ends
	// because Stop was called (context.Cause tells it from the parent's end).
	ErrStop = errors.New("service stopped")
)

// Service is a part that runs in the background between Start and Stop.
type Service interface {
	// Start begins the part's goroutine and returns; an error means nothing
	// runs.
	Start(ctx context.Context) error
	// Stop ends the part and returns once its goroutine has exited. It is
	// safe to call twice and without Start.
	Stop()
}

// BaseStartStop holds the state of one service's lifecycle. Embed it; the
// zero value is ready. It is safe for concurrent use.
type BaseStartStop struct {
	mu       sync.Mutex
	started  bool
	stopping bool
	cancel   context.CancelCauseFunc
	done     chan struct{} // closed when the goroutine exits; made by StartInit or Done
}

// StartInit begins a service's Start. It returns the context the service
// runs on, which ends at Stop (with cause ErrStop) or when ctx ends, and
// done, which the service's goroutine must call when it exits (defer it
// first thing); a Start that fails after StartInit calls done itself before
// returning its error, and the service stays used up. StartInit fails with
// ErrStarted or ErrStopped, and the service must then return that error
// (wrapped with its name) without starting anything.
func (s *BaseStartStop) StartInit(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopping:
		return nil, nil, ErrStopped
	case s.started:
		return nil, nil, ErrStarted
	}
	s.started = true
	if s.done == nil {
		s.done = make(chan struct{})
	}
	ctx, s.cancel = context.WithCancelCause(ctx)
	cancel, closed := s.cancel, s.done
	return ctx, sync.OnceFunc(func() {
		cancel(nil) // the goroutine is gone: release the context
		close(closed)
	}), nil
}

// StartLoop is the whole Start of a service that is one loop: StartInit,
// then loop in one goroutine on the context StartInit returned, done called
// when loop returns. A StartInit error comes back wrapped with name.
func (s *BaseStartStop) StartLoop(ctx context.Context, name string, loop func(ctx context.Context)) error {
	ctx, done, err := s.StartInit(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		defer done()
		loop(ctx)
	}()
	return nil
}

// Stop ends the context of a started service and waits until its goroutine
// called done. It is safe to call twice, concurrently and without Start;
// after it, StartInit fails with ErrStopped.
func (s *BaseStartStop) Stop() {
	s.mu.Lock()
	s.stopping = true
	started, cancel, done := s.started, s.cancel, s.done
	s.mu.Unlock()
	if !started {
		return
	}
	cancel(ErrStop)
	<-done
}

// Stopping reports whether Stop was called.
func (s *BaseStartStop) Stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Done returns a channel closed when the service's goroutine has exited.
// Before Start it is the channel Start will use; it is never closed if the
// service never starts.
func (s *BaseStartStop) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

// Stack stops, last started first, what a command started: services and
// plain closers (a database, a producer, a listener) alike. The order is
// the point, which is why it is a list and not river's StopAllParallel: a
// relay stopping records its poll in flight through the producer and the
// database, so both must outlive it.
type Stack struct {
	mu      sync.Mutex
	closers []func()
	once    sync.Once
}

// Start starts svc on ctx and, once it runs, adds its Stop.
func (st *Stack) Start(ctx context.Context, svc Service) error {
	if err := svc.Start(ctx); err != nil {
		return err
	}
	st.OnStop(svc.Stop)
	return nil
}

// OnStop adds fn, to run at Stop before everything added earlier.
func (st *Stack) OnStop(fn func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closers = append(st.closers, fn)
}

// Stop runs what was added, last first, once; later calls wait for the
// first to finish.
func (st *Stack) Stop() {
	st.once.Do(func() {
		st.mu.Lock()
		closers := st.closers
		st.mu.Unlock()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	})
}

// StopWithin runs Stop and returns ctx's error if ctx ends first; Stop then
// goes on in the background, and the caller abandons what is still running
// (rows of a poll in flight are recovered by the stale limit, as after a
// crash).
func (st *Stack) StopWithin(ctx context.Context) error {
	done := make(chan struct{})
	go func() { st.Stop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
