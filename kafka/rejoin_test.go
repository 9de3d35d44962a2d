package kafka

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/kafka/kafkatest"
)

// rejoinTestLog records the consumer's warnings of failed joins with their
// pause (retry_in) and the time they were logged.
type rejoinTestLog struct {
	mu    sync.Mutex
	lines []rejoinTestLine
	// consumerErrors are the times of "consumer error" warnings.
	consumerErrors []time.Time
}

type rejoinTestLine struct {
	at      time.Time
	msg     string
	retryIn time.Duration
	brokers string
}

func (l *rejoinTestLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *rejoinTestLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *rejoinTestLog) WithGroup(string) slog.Handler            { return l }
func (l *rejoinTestLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	if r.Message == "consumer error" {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.consumerErrors = append(l.consumerErrors, time.Now())
		return nil
	}
	line := rejoinTestLine{at: time.Now(), msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "retry_in", "pause":
			line.retryIn = a.Value.Duration()
		case "brokers":
			line.brokers = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

func (l *rejoinTestLog) snapshot() []rejoinTestLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rejoinTestLine(nil), l.lines...)
}

// With no broker listening, failed joins are logged with the brokers waited
// for and a pause that doubles (jittered into its upper half) instead of
// several times a second; when the broker appears the consumer joins and
// reads, and once a session was set up the next failure waits the base
// pause again.
func TestConsumerRejoinPauseGrowsWhileBrokersAreDown(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	b.Stop() // the port is known and refuses connections
	const base, maxPause = 250 * time.Millisecond, 2 * time.Second

	log := &rejoinTestLog{}
	h := &consumerTestHandler{}
	c, err := NewConsumer(ConsumerConfig{Brokers: []string{b.Addr}, GroupID: "consumer-test-rejoin",
		CommitInterval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		RejoinBase: base, RejoinMax: maxPause}, h, slog.New(log))
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)

	// 6 failures: pauses of 250ms, 500ms, 1s, then the 2s cap, each
	// jittered into [d/2, d].
	const failures = 6
	require.Eventually(t, func() bool { return len(log.snapshot()) >= failures }, time.Minute, 10*time.Millisecond)
	lines := log.snapshot()
	var minTotal time.Duration
	for i, line := range lines[:failures] {
		nominal := min(base<<i, maxPause)
		require.GreaterOrEqual(t, line.retryIn, nominal/2, "failure %d: %s", i+1, line.msg)
		require.LessOrEqual(t, line.retryIn, nominal, "failure %d: %s", i+1, line.msg)
		require.Equal(t, b.Addr, line.brokers)
		require.Contains(t, line.msg, b.Addr, "the message names the brokers it waits for")
		require.Contains(t, line.msg, "retrying in "+line.retryIn.String())
		if i < failures-1 {
			minTotal += line.retryIn
		}
	}
	t.Logf("%d failed joins logged in %s", failures, lines[failures-1].at.Sub(lines[0].at).Round(time.Millisecond))
	// The pauses really were waited: a slow machine only makes this longer.
	require.GreaterOrEqual(t, lines[failures-1].at.Sub(lines[0].at), minTotal,
		"%d failed joins logged in %s", failures, lines[failures-1].at.Sub(lines[0].at))
	require.Empty(t, h.snapshot())

	// The broker appears: the consumer joins within a capped pause and reads.
	b.Restart(t)
	rec := consumerTestRecord(1, 7)
	b.Produce(t, rec)
	require.Eventually(t, func() bool { return len(h.snapshot()) == 1 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, rec.Headers["event-id"], h.snapshot()[0].EventID)

	// A session was set up: the next outage starts from the base pause.
	before := len(log.snapshot())
	b.Stop()
	require.Eventually(t, func() bool { return len(log.snapshot()) > before }, time.Minute, 10*time.Millisecond)
	first := log.snapshot()[before]
	require.LessOrEqual(t, first.retryIn, base, "the pause was reset by the session: %s", first.msg)

	// Meanwhile every partition's consumer failed again and again; they
	// warned at most once a second.
	log.mu.Lock()
	warnings := append([]time.Time(nil), log.consumerErrors...)
	log.mu.Unlock()
	if len(warnings) > 1 {
		span := warnings[len(warnings)-1].Sub(warnings[0])
		require.LessOrEqual(t, len(warnings), 1+int(span/consumerErrorWarnEvery),
			"%d consumer error warnings in %s", len(warnings), span)
	}
}
