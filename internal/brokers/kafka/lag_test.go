package kafka

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/relay"
)

func lagSum(t *testing.T, r *LagReader) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lag, err := r.Lag(ctx)
	require.NoError(t, err)
	var n int64
	for _, l := range lag {
		n += l
	}
	return n
}

// A group that never committed lags by every record of the topic; once a
// member handled and committed them the lag is 0, and records produced
// while no member runs show up again, partition by partition.
func TestLagReaderFollowsCommittedOffsets(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 3))
	recs := consumerTestRecords(12, 4)
	b.Produce(t, recs[:9]...)
	r, err := NewLagReader(ConsumerConfig{Brokers: []string{b.Addr}, GroupID: "lag-test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	require.EqualValues(t, 9, lagSum(t, r), "a new group starts at the oldest record")

	h := &consumerTestHandler{}
	c := consumerTestStart(t, b.Addr, "lag-test", h, nil)
	require.Eventually(t, func() bool { return len(h.snapshot()) == 9 }, 20*time.Second, 20*time.Millisecond)
	c.Stop() // commits what was handled
	require.EqualValues(t, 0, lagSum(t, r))

	b.Produce(t, recs[9:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lag, err := r.Lag(ctx)
	require.NoError(t, err)
	require.Len(t, lag, 3)
	want := map[int32]int64{}
	for _, rec := range recs[9:] {
		want[kafkatest.PartitionFor(rec.Key, 3)]++
	}
	for p := range int32(3) {
		require.Equal(t, want[p], lag[p], "partition %d", p)
	}
}

// Brokers that do not answer are an unavailable error, not a lag of 0.
func TestLagReaderUnreachableBrokers(t *testing.T) {
	t.Parallel()
	r, err := NewLagReader(ConsumerConfig{Brokers: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	_, err = r.Lag(context.Background())
	require.ErrorIs(t, err, relay.ErrUnavailable)
	require.NoError(t, r.Close())

	_, err = NewLagReader(ConsumerConfig{})
	require.ErrorContains(t, err, "Brokers")
}

// Brokers that accept connections and never answer: the first read ends with
// its context, and a read asked for while that one still hangs is refused at
// once instead of queueing behind it.
func TestLagReaderRefusesASecondReadWhileOneHangs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	r, err := NewLagReader(ConsumerConfig{Brokers: []string{ln.Addr().String()}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = r.Lag(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = r.Lag(context.Background())
	require.ErrorIs(t, err, ErrLagReadInProgress)
	require.ErrorIs(t, err, relay.ErrUnavailable)
}
