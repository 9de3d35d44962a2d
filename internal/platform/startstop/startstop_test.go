package startstop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loop is the smallest service: it runs until its context ends, and can
// be held inside its round to show that Stop waits.
type loop struct {
	BaseStartStop
	hold  chan struct{} // the goroutine waits for it after its context ends
	cause chan error    // the cause its context ended with
}

func (l *loop) Start(ctx context.Context) error {
	ctx, done, err := l.StartInit(ctx)
	if err != nil {
		return err
	}
	go func() {
		defer done()
		<-ctx.Done()
		l.cause <- context.Cause(ctx)
		<-l.hold
	}()
	return nil
}

func newLoop() *loop { return &loop{hold: make(chan struct{}), cause: make(chan error, 1)} }

func TestStopWaitsForTheGoroutine(t *testing.T) {
	t.Parallel()
	l := newLoop()
	require.NoError(t, l.Start(context.Background()))
	require.ErrorIs(t, l.Start(context.Background()), ErrStarted)
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	require.ErrorIs(t, <-l.cause, ErrStop, "Stop ends the context with ErrStop")
	require.True(t, l.Stopping())
	select {
	case <-stopped:
		t.Fatal("Stop returned while the goroutine was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(l.hold)
	<-stopped
	<-l.Done()
	l.Stop() // twice
	require.ErrorIs(t, l.Start(context.Background()), ErrStopped, "a stopped service does not start again")
}

func TestStopWithoutStartKeepsItFromStarting(t *testing.T) {
	t.Parallel()
	l := newLoop()
	l.Stop()
	l.Stop()
	require.ErrorIs(t, l.Start(context.Background()), ErrStopped)
	select {
	case <-l.Done():
		t.Fatal("Done closed for a service that never ran")
	default:
	}
}

func TestTheParentEndsTheService(t *testing.T) {
	t.Parallel()
	l := newLoop()
	close(l.hold)
	ctx, cancel := context.WithCancel(context.Background())
	done := l.Done() // taken before Start: the same channel
	require.NoError(t, l.Start(ctx))
	cancel()
	require.ErrorIs(t, <-l.cause, context.Canceled)
	<-done
	require.False(t, l.Stopping())
	require.ErrorIs(t, l.Start(context.Background()), ErrStarted, "an ended service is used up")
	l.Stop()
}

func TestStackStopsInReverseOnce(t *testing.T) {
	t.Parallel()
	var st Stack
	var order []string
	l := newLoop()
	close(l.hold)
	st.OnStop(func() {
		<-l.Done() // the service stopped before what it needs
		order = append(order, "db")
	})
	require.NoError(t, st.Start(context.Background(), l))
	st.OnStop(func() { order = append(order, "last") })
	failing := newLoop()
	failing.Stop()
	require.ErrorIs(t, st.Start(context.Background(), failing), ErrStopped, "not added")
	st.Stop()
	st.Stop()
	require.Equal(t, []string{"last", "db"}, order)
	require.True(t, l.Stopping())
}

func TestStackStopWithinGivesUp(t *testing.T) {
	t.Parallel()
	var st Stack
	release := make(chan struct{})
	st.OnStop(func() { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.True(t, errors.Is(st.StopWithin(ctx), context.DeadlineExceeded))
	close(release)
	require.NoError(t, st.StopWithin(context.Background()), "the first Stop finished")
}

func TestStartLoopRunsTheLoopUntilStop(t *testing.T) {
	t.Parallel()
	var s BaseStartStop
	cause := make(chan error, 1)
	require.NoError(t, s.StartLoop(context.Background(), "cleaner", func(ctx context.Context) {
		<-ctx.Done()
		cause <- context.Cause(ctx)
	}))
	err := s.StartLoop(context.Background(), "cleaner", func(context.Context) { t.Error("a second loop ran") })
	require.ErrorIs(t, err, ErrStarted)
	require.EqualError(t, err, "cleaner: already started", "the error names the service")
	s.Stop()
	select {
	case err := <-cause:
		require.ErrorIs(t, err, ErrStop)
	default:
		t.Fatal("Stop returned before the loop did")
	}
	<-s.Done()
}
