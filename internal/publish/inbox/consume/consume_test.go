package consume_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/inbox/consume"
	"github.com/postingsvc/posting/internal/publish/inbox/inboxtest"
)

// memTopic is the name memBroker's events carry.
const memTopic = "mem"

// memBroker is the smallest broker a consumer could read: a log of
// messages in memory, one committed offset for its one group, one active
// consumer at a time, and a dead-letter list. Its consumer only fetches
// and settles; the loop does the rest. It passing the suite is what a third
// broker's package has to show.
type memBroker struct {
	lease chan struct{} // held by the active consumer

	mu        sync.Mutex
	log       []inboxtest.Message
	committed int
	dead      [][]byte
	published chan struct{} // closed and replaced by every Publish
}

func newMemBroker() *memBroker {
	return &memBroker{lease: make(chan struct{}, 1), published: make(chan struct{})}
}

func (b *memBroker) publish(msgs ...inboxtest.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = append(b.log, msgs...)
	close(b.published)
	b.published = make(chan struct{})
}

// fetch waits for messages at next and returns those there, up to
// inbox.MaxBatch; nil when ctx ended first.
func (b *memBroker) fetch(ctx context.Context, next int) []consume.Message {
	for {
		b.mu.Lock()
		avail, published := b.log[min(next, len(b.log)):], b.published
		b.mu.Unlock()
		if len(avail) > 0 {
			msgs := make([]consume.Message, min(len(avail), inbox.MaxBatch))
			for i := range msgs {
				m, off := avail[i], next+i
				msgs[i] = consume.Message{Key: []byte(m.Key), Headers: m.Headers, Value: m.Value,
					Topic: memTopic, Offset: int64(off), Where: []any{"offset", off}}
			}
			return msgs
		}
		select {
		case <-published:
		case <-ctx.Done():
			return nil
		}
	}
}

// memSettler commits offsets of a batch read from base, and dead-letters.
type memSettler struct {
	b    *memBroker
	base int
	msgs []consume.Message
}

func (s memSettler) Ack(i int) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.committed = max(s.b.committed, s.base+i+1)
	return nil
}

func (s memSettler) Skip(i int) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.dead = append(s.b.dead, s.msgs[i].Value)
	s.b.committed = max(s.b.committed, s.base+i+1)
	return nil
}

// memConsumer is one member of the group.
type memConsumer struct {
	startstop.BaseStartStop
	b    *memBroker
	h    inbox.Handler
	loop *consume.Loop
}

func (c *memConsumer) Start(ctx context.Context) error {
	ctx, done, err := c.StartInit(ctx)
	if err != nil {
		return err
	}
	go func() {
		defer done()
		c.run(ctx)
	}()
	return nil
}

func (c *memConsumer) run(ctx context.Context) {
	select {
	case c.b.lease <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-c.b.lease }()
	if ph, ok := c.h.(inbox.PartitionHandler); ok {
		if err := ph.Assigned(ctx, memTopic, []int32{0}); err != nil {
			return
		}
		defer ph.Revoked(memTopic, []int32{0})
	}
	c.b.mu.Lock()
	next := c.b.committed
	c.b.mu.Unlock()
	for {
		msgs := c.b.fetch(ctx, next)
		if msgs == nil {
			return
		}
		settled, err := c.loop.Handle(ctx, msgs, memSettler{b: c.b, base: next, msgs: msgs})
		if err != nil || !settled {
			return
		}
		next += len(msgs)
	}
}

// The loop behind a broker that holds nothing but a log and an offset
// passes the suite every broker's consumer passes.
func TestLoopPassesTheConsumerSuiteInMemory(t *testing.T) {
	t.Parallel()
	inboxtest.RunConsumerSuite(t, func(t *testing.T) *inboxtest.ConsumerBroker {
		b := newMemBroker()
		return &inboxtest.ConsumerBroker{
			Topic:   memTopic,
			Publish: func(_ *testing.T, msgs ...inboxtest.Message) { b.publish(msgs...) },
			Start: func(t *testing.T, h inbox.Handler, observe func(string, string)) func() {
				c := &memConsumer{b: b, h: h, loop: consume.New(consume.Config{Handler: h,
					RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond, Observe: observe})}
				require.NoError(t, c.Start(context.Background()))
				t.Cleanup(c.Stop)
				return c.Stop
			},
			Offset: func(n int) int64 { return int64(n) },
			Dead: func(t *testing.T, n int) [][]byte {
				dead := func() [][]byte {
					b.mu.Lock()
					defer b.mu.Unlock()
					return append([][]byte(nil), b.dead...)
				}
				require.Eventually(t, func() bool { return len(dead()) >= n }, 10*time.Second, 10*time.Millisecond)
				require.Len(t, dead(), n, "dead-lettered messages")
				return dead()
			},
		}
	})
}

// Collect takes what waits on the channel, up to inbox.MaxBatch, without
// waiting, and stops at a closed channel.
func TestCollectTakesWhatWaitsUpToMaxBatch(t *testing.T) {
	t.Parallel()
	ch := make(chan int, inbox.MaxBatch+10)
	for i := range inbox.MaxBatch + 10 {
		ch <- i + 1
	}
	batch := consume.Collect(0, ch)
	require.Len(t, batch, inbox.MaxBatch)
	require.Equal(t, 0, batch[0])
	require.Equal(t, inbox.MaxBatch-1, batch[len(batch)-1], "in order")

	require.Equal(t, []int{7}, consume.Collect(7, make(chan int)), "nothing waiting: the first alone")
	rest := consume.Collect(-1, ch)
	require.Len(t, rest, 12, "the first and the 11 left")
	close(ch)
	require.Equal(t, []int{9}, consume.Collect(9, ch), "a closed channel ends the batch")
}

// RetryLimits are what every consumer's Validate checks of its RetryBase
// and RetryMax: the defaults pass, and the first value out of range is
// named with the consumer's field prefix.
func TestRetryLimitsNameTheConsumersRetrySetting(t *testing.T) {
	t.Parallel()
	const f = "x.ConsumerConfig."
	require.NoError(t, config.CheckDurations(f, consume.RetryLimits(consume.DefaultRetryBase, consume.DefaultRetryMax)))
	require.NoError(t, config.CheckDurations(f, consume.RetryLimits(time.Millisecond, 10*time.Minute)), "the bounds are inclusive")
	for _, c := range []struct {
		base, max time.Duration
		want      string
	}{
		{0, time.Second, "x.ConsumerConfig.RetryBase 0s: want 1ms to 1m0s"},
		{2 * time.Minute, 3 * time.Minute, "x.ConsumerConfig.RetryBase 2m0s: want 1ms to 1m0s"},
		{time.Second, time.Millisecond, "x.ConsumerConfig.RetryMax 1ms: want 1s to 10m0s"},
		{time.Second, 11 * time.Minute, "x.ConsumerConfig.RetryMax 11m0s: want 1s to 10m0s"},
	} {
		require.EqualError(t, config.CheckDurations(f, consume.RetryLimits(c.base, c.max)), c.want)
	}
}
