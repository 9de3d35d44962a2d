package wakeup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Requests made while a send is under way make one more send, not one each:
// a burst of commits costs the database one NOTIFY per window, and Notify
// never waits for the database.
func TestNotifierCoalescesRequestsIntoOneSend(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	started, release := make(chan struct{}, 10), make(chan struct{})
	n, err := NewNotifier(NotifierConfig{Window: time.Millisecond, Send: func(context.Context) error {
		sends.Add(1)
		started <- struct{}{}
		<-release
		return nil
	}})
	require.NoError(t, err)
	done := make(chan struct{}, 10)
	n.sent = func(error) { done <- struct{}{} }
	require.NoError(t, n.Start(context.Background()))

	n.Notify()
	waitFor(t, started, "the first send")
	for range 100 {
		n.Notify() // while the first send holds: none of these blocks
	}
	close(release)
	waitFor(t, done, "the first send's end")
	waitFor(t, started, "the coalesced send")
	waitFor(t, done, "the coalesced send's end")
	n.Stop()
	require.Equal(t, int32(2), sends.Load(), "101 requests, one of them during a send")
}

func TestNotifierConfigLimits(t *testing.T) {
	t.Parallel()
	send := func(context.Context) error { return nil }
	for _, c := range []NotifierConfig{{}, {Send: send, Window: time.Microsecond}, {Send: send, Window: 2 * time.Second}} {
		_, err := NewNotifier(c)
		require.Error(t, err, "%+v", c)
	}
	n, err := NewNotifier(NotifierConfig{Send: send})
	require.NoError(t, err)
	require.Equal(t, DefaultNotifyWindow, n.cfg.Window)
}
