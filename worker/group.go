package worker

import (
	"context"
	"sync"
)

// group coalesces the calls of many goroutines into batches: a call waits
// while a batch is running, and the calls that queued meanwhile are run
// together, up to max at a time, by at most runners goroutines at once. It is
// how a spike of publications due together shares its database round trips
// (group commit) without a goroutine that lives longer than the queue.
type group[K, V any] struct {
	max     int
	runners int
	run     func(keys []K) []V // one value per key, in order

	mu      sync.Mutex
	pending []*groupCall[K, V]
	running int
}

type groupCall[K, V any] struct {
	key  K
	val  V
	done chan struct{}
}

// do queues key and returns its value once its batch has run. With a ctx
// that ends first it returns ctx's error and no value; the batch still runs
// (abandon only calls whose effect does not matter, reads).
func (g *group[K, V]) do(ctx context.Context, key K) (V, error) {
	c := &groupCall[K, V]{key: key, done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	if g.running < g.runners {
		g.running++
		go g.loop()
	}
	g.mu.Unlock()
	if ctx == nil {
		<-c.done
		return c.val, nil
	}
	select {
	case <-c.done:
		return c.val, nil
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// loop runs batches until the queue is empty.
func (g *group[K, V]) loop() {
	for {
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		n := min(len(g.pending), g.max)
		batch := make([]*groupCall[K, V], n)
		copy(batch, g.pending)
		g.pending = append(g.pending[:0:0], g.pending[n:]...)
		g.mu.Unlock()
		keys := make([]K, n)
		for i, c := range batch {
			keys[i] = c.key
		}
		vals := g.run(keys)
		for i, c := range batch {
			c.val = vals[i]
			close(c.done)
		}
	}
}
