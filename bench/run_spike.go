package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/postingsvc/posting/bench/spike"
	"github.com/postingsvc/posting/database"
)

// runSpike measures the spike lag with bench/spike: posts due in the same
// second published through scheduler, relay and worker on an in-process
// broker, with the service's default intervals. spike.Run needs a database
// without posts, so on one that held posts before the bench it says so
// instead of a figure.
func runSpike(ctx context.Context, cfg Config, db *database.DB, out io.Writer) error {
	if cfg.SpikePosts == 0 {
		return nil
	}
	fmt.Fprintf(out, "spike: %d posts due in the same second, scheduler every 5s, relay and worker at their defaults, in-process broker\n", cfg.SpikePosts)
	sc := spike.DefaultConfig()
	sc.Posts, sc.DueIn, sc.Logger = cfg.SpikePosts, cfg.SpikeDueIn, cfg.Logger
	res, err := spike.Run(ctx, db.DB, sc)
	if errors.Is(err, spike.ErrNotEmpty) {
		fmt.Fprintf(out, "  spike lag: not measured: the database holds posts of its own (%v)\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  spike lag (published_at - scheduledAt): %d posts, p50 %s, p99 %s, max %s; all WORKING after %s, all recorded by the worker after %s\n",
		res.Posts, ms(res.P50), ms(res.P99), ms(res.Max), res.AllWorking.Round(time.Millisecond), res.AllRecorded.Round(time.Millisecond))
	return nil
}
