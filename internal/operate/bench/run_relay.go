package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/operate/bench/relaybench"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
)

// fixedBatches are the fixed batch sizes the default relay is compared
// with, besides Config.RelayBatch.
var fixedBatches = []int{100, 1000, 2000}

// fixedDrain is one drain at a fixed batch size.
type fixedDrain struct {
	batch int
	res   relaybench.Result
}

// runRelay measures the relay beside the raw set-based limit and the seed
// project's relay, each draining a fresh backlog.
func runRelay(ctx context.Context, cfg Config, db *database.DB, clean func(context.Context) error, out io.Writer) error {
	pc := cfg.Producer
	if len(pc.Brokers) == 0 {
		ec := kafka.DefaultEmbeddedConfig()
		ec.Addr, ec.Topic = "127.0.0.1:0", pc.Topic
		e, err := kafka.StartEmbedded(ec, cfg.Logger)
		if err != nil {
			return fmt.Errorf("in-process broker: %w", err)
		}
		defer e.Close()
		pc.Brokers = []string{e.Addr()}
	}
	producer, err := kafka.NewProducer(pc, cfg.Logger)
	if err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	defer producer.Close()
	drain := func(n int, run func() (relaybench.Result, error)) (relaybench.Result, error) {
		if err := clean(ctx); err != nil {
			return relaybench.Result{}, err
		}
		if err := relaybench.Seed(ctx, db.DB, n); err != nil {
			return relaybench.Result{}, err
		}
		return run()
	}
	raw, err := drain(cfg.RelayEvents, func() (relaybench.Result, error) { return relaybench.Raw(ctx, db.DB, cfg.RelayBatch) })
	if err != nil {
		return err
	}
	fixedRun := func(batch int) (relaybench.Result, error) {
		return drain(cfg.RelayEvents, func() (relaybench.Result, error) { return relaybench.Relay(ctx, db.DB, producer, batch) })
	}
	rel, err := fixedRun(cfg.RelayBatch)
	if err != nil {
		return err
	}
	def, err := drain(cfg.RelayEvents, func() (relaybench.Result, error) { return relaybench.Default(ctx, db.DB, producer) })
	if err != nil {
		return err
	}
	fixed := []fixedDrain{{cfg.RelayBatch, rel}}
	for _, batch := range fixedBatches {
		if batch == cfg.RelayBatch {
			continue
		}
		r, err := fixedRun(batch)
		if err != nil {
			return err
		}
		fixed = append(fixed, fixedDrain{batch, r})
	}
	slices.SortFunc(fixed, func(a, b fixedDrain) int { return a.batch - b.batch })
	seed, err := drain(cfg.SeedStyleEvents, func() (relaybench.Result, error) { return relaybench.SeedStyle(ctx, db.DB, producer) })
	if err != nil {
		return err
	}
	if err := clean(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "relay: backlog of %d events (%d per post), batch %d, %s\n", cfg.RelayEvents, relaybench.EventsPerPost, cfg.RelayBatch, cfg.where())
	fmt.Fprintf(out, "  raw set-based claim+ack events/s: %.0f (no broker)\n", raw.PerSecond())
	fmt.Fprintf(out, "  relay events/s: %.0f (%.2f x raw)\n", rel.PerSecond(), ratio(rel.PerSecond(), raw.PerSecond()))
	printDefaultVsFixed(out, def, fixed, raw)
	fmt.Fprintf(out, "  seed-style relay events/s: %.0f (%.3f x raw; backlog of %d, one row at a time)\n",
		seed.PerSecond(), ratio(seed.PerSecond(), raw.PerSecond()), cfg.SeedStyleEvents)
	// Two backlogs: posts of 5 events, where per-post order leaves one
	// head per post claimable at a time, and posts of one event each.
	for _, perPost := range []int{relaybench.EventsPerPost, 1} {
		if err := runRelayInstances(ctx, cfg, pc, db, perPost, func(n int) error {
			if err := clean(ctx); err != nil {
				return err
			}
			return relaybench.SeedPosts(ctx, db.DB, n, perPost)
		}, out); err != nil {
			return err
		}
	}
	return clean(ctx)
}

// relayInstanceCounts are the numbers of relays that drain one backlog
// together: more `serve` processes must not make the drain slower.
var relayInstanceCounts = []int{1, 2, 4}

// runRelayInstances drains a fresh backlog of Config.RelayEvents, perPost
// events per post, with 1, 2 and 4 relays at their default settings at
// once, each with its own producer as each `serve` has, and prints their
// events/s. seed empties the outbox and writes the backlog.
func runRelayInstances(ctx context.Context, cfg Config, pc kafka.ProducerConfig, db *database.DB, perPost int, seed func(n int) error, out io.Writer) error {
	var figures []string
	first := 0.0
	for _, n := range relayInstanceCounts {
		if err := seed(cfg.RelayEvents); err != nil {
			return err
		}
		senders := make([]relay.Sender, n)
		for i := range senders {
			p, err := kafka.NewProducer(pc, cfg.Logger)
			if err != nil {
				return fmt.Errorf("kafka producer: %w", err)
			}
			defer p.Close()
			senders[i] = p
		}
		res, err := RelayInstances(ctx, db, senders)
		if err != nil {
			return err
		}
		if n == relayInstanceCounts[0] {
			first = res.PerSecond()
		}
		figures = append(figures, fmt.Sprintf("%d: %.0f (%.2f x %d)", n, res.PerSecond(), ratio(res.PerSecond(), first), relayInstanceCounts[0]))
	}
	fmt.Fprintf(out, "  relay events/s, default settings, instances draining one backlog at once (%d events per post): %s\n", perPost, strings.Join(figures, ", "))
	return nil
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
