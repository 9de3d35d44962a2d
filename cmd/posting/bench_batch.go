package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/relay/relaybench"
)

// fixedBatches are the fixed batch sizes the default relay is compared
// with, besides --relay-batch.
var fixedBatches = []int{100, 1000, 2000}

// fixedDrain is one drain at a fixed batch size.
type fixedDrain struct {
	batch int
	res   relaybench.Result
}

// drainDefaultVsFixed drains the backlog with the relay at its default
// settings (the batch grows from 100) and at each fixed batch size of
// fixedBatches; rel is the drain already made at --relay-batch. drain seeds
// a fresh backlog before each run.
func drainDefaultVsFixed(b *benchSettings, rel relaybench.Result,
	drain func(n int, run func() (relaybench.Result, error)) (relaybench.Result, error),
	fixedRun func(batch int) (relaybench.Result, error), defaultRun func() (relaybench.Result, error),
) (relaybench.Result, []fixedDrain, error) {
	def, err := drain(b.RelayEvents, defaultRun)
	if err != nil {
		return def, nil, err
	}
	fixed := []fixedDrain{{b.RelayBatch, rel}}
	for _, batch := range fixedBatches {
		if batch == b.RelayBatch {
			continue
		}
		r, err := drain(b.RelayEvents, func() (relaybench.Result, error) { return fixedRun(batch) })
		if err != nil {
			return def, nil, err
		}
		fixed = append(fixed, fixedDrain{batch, r})
	}
	slices.SortFunc(fixed, func(a, b fixedDrain) int { return a.batch - b.batch })
	return def, fixed, nil
}

// printDefaultVsFixed prints the default relay's drain beside the best
// fixed batch.
func printDefaultVsFixed(out io.Writer, def relaybench.Result, fixed []fixedDrain, raw relaybench.Result) {
	best := fixed[0]
	var all []string
	for _, f := range fixed {
		if f.res.PerSecond() > best.res.PerSecond() {
			best = f
		}
		all = append(all, fmt.Sprintf("%d: %.0f", f.batch, f.res.PerSecond()))
	}
	d := relay.DefaultConfig()
	fmt.Fprintf(out, "  relay events/s, default settings (batch %d growing to %d while polls come back full): %.0f (%.2f x the best fixed batch, %d; %.2f x raw)\n",
		d.BatchSize, d.MaxBatchSize, def.PerSecond(), ratio(def.PerSecond(), best.res.PerSecond()), best.batch, ratio(def.PerSecond(), raw.PerSecond()))
	fmt.Fprintf(out, "  relay events/s at fixed batches: %s\n", strings.Join(all, ", "))
}
