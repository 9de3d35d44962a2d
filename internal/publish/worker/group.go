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
	return g.queue(false, key)[0].wait(ctx)
}

// queue queues keys, at the back of the queue or, with first, at its front
// (ahead of every call queued before), under one lock, and returns their
// calls in the order of keys.
func (g *group[K, V]) queue(first bool, keys ...K) []*groupCall[K, V] {
	calls := make([]*groupCall[K, V], len(keys))
	for i, k := range keys {
		calls[i] = &groupCall[K, V]{key: k, done: make(chan struct{})}
	}
	g.mu.Lock()
	if first {
		g.pending = append(calls[:len(calls):len(calls)], g.pending...)
	} else {
		g.pending = append(g.pending, calls...)
	}
	// A runner per max keys, up to runners: a lone call starts one at
	// once, so that its batch overlaps the one running.
	for i := 0; i < len(keys) && g.running < g.runners; i += g.max {
		g.running++
		go g.loop()
	}
	g.mu.Unlock()
	return calls
}

// wait returns c's value once its batch has run, or ctx's error if ctx ends
// first (nil: no end).
func (c *groupCall[K, V]) wait(ctx context.Context) (V, error) {
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
