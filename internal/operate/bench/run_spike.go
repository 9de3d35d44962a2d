package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/postingsvc/posting/internal/operate/bench/spike"
	"github.com/postingsvc/posting/internal/storage/database"
)

// runSpike measures the spike lag with internal/operate/bench/spike: posts due in the same
// second published through scheduler, relay and worker with the service's
// default intervals, on an in-process broker and, with
// Config.SpikeRabbitMQURL, again through RabbitMQ. spike.Run needs a
// database without posts, so on one that held posts before the bench it
// says so instead of a figure. clean deletes the first spike's posts
// before the second.
func runSpike(ctx context.Context, cfg Config, db *database.DB, clean func(context.Context) error, out io.Writer) error {
	if cfg.SpikePosts == 0 {
		return nil
	}
	brokers := []struct{ name, rabbitMQURL string }{{"in-process Kafka broker", ""}}
	if cfg.SpikeRabbitMQURL != "" {
		brokers = append(brokers, struct{ name, rabbitMQURL string }{"RabbitMQ", cfg.SpikeRabbitMQURL})
	}
	if err := clean(ctx); err != nil {
		return err
	}
	floor, err := spike.Floor(ctx, db.DB, cfg.SpikePosts)
	if errors.Is(err, spike.ErrNotEmpty) {
		fmt.Fprintf(out, "  spike lag: not measured: the database holds posts of its own (%v)\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "spike floor: raw SQL writes the same %d PUBLISHED publications and post statuses in bulk (%d a transaction) in %s\n",
		cfg.SpikePosts, spike.FloorChunk, floor.Round(time.Millisecond))
	for _, b := range brokers {
		if err := clean(ctx); err != nil {
			return err
		}
		fmt.Fprintf(out, "spike: %d posts due in the same second, scheduler every 5s, relay and worker at their defaults, %s\n", cfg.SpikePosts, b.name)
		sc := spike.DefaultConfig()
		sc.Posts, sc.DueIn, sc.Logger, sc.RabbitMQURL = cfg.SpikePosts, cfg.SpikeDueIn, cfg.Logger, b.rabbitMQURL
		res, err := spike.Run(ctx, db.DB, sc)
		if errors.Is(err, spike.ErrNotEmpty) {
			fmt.Fprintf(out, "  spike lag: not measured: the database holds posts of its own (%v)\n", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("spike through %s: %w", b.name, err)
		}
		fmt.Fprintf(out, "  spike lag (published_at - scheduledAt): %d posts, p50 %s, p99 %s (%.1f x the floor), max %s; all WORKING after %s, all recorded by the worker after %s\n",
			res.Posts, ms(res.P50), ms(res.P99), ratio(res.P99.Seconds(), floor.Seconds()), ms(res.Max), res.AllWorking.Round(time.Millisecond), res.AllRecorded.Round(time.Millisecond))
	}
	return nil
}
