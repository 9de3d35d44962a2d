package relay

import "sync"

// DefaultMaxBatchSize is Config.MaxBatchSize's default: while polls come
// back full the relay doubles its batch from BatchSize up to this, where
// the drain rate measured here stops rising (the best fixed batch was
// 500-1000 on MariaDB and PostgreSQL).
const DefaultMaxBatchSize = 1000

// batchSizer is how many rows the next claim asks for: BatchSize while
// polls find less than that, doubled after each claim that came back full
// (a backlog) up to the bound, halved after one that came back less than
// half full, and back to BatchSize after one that found nothing. The claim
// rule, and with it per-post order, does not depend on the size.
type batchSizer struct {
	mu             sync.Mutex
	seed, max, cur int
}

func newBatchSizer(seed, bound int) *batchSizer {
	return &batchSizer{seed: seed, max: max(seed, bound), cur: seed}
}

// BatchSize is how many rows the relay's next claim asks for: the
// configured BatchSize, or more under a backlog (Config.MaxBatchSize).
func (r *Relay) BatchSize() int { return r.batch.size() }

// size is the size of the next claim.
func (b *batchSizer) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur
}

// observe records that a claim of size rows found n.
func (b *batchSizer) observe(size, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case n == 0:
		b.cur = b.seed
	case n >= size:
		b.cur = min(max(b.cur, 2*size), b.max)
	case n < size/2:
		b.cur = max(b.seed, min(b.cur, size/2))
	}
}
