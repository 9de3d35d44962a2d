package reservation

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
)

// MaterializerConfig configures a Materializer. Start from
// DefaultMaterializerConfig.
type MaterializerConfig struct {
	// Interval is the pause between two runs. Default 1m; 100ms..1h.
	Interval time.Duration
	// BatchSize bounds the series one run extends. Default 100; 1..10000.
	BatchSize int
	// Logger receives the loop's logs. Default slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called with every run's result and error.
	Observe func(MaterializeResult, error)
}

// DefaultMaterializerConfig returns a MaterializerConfig with every field
// at its default: the one place the defaults are written.
func DefaultMaterializerConfig() MaterializerConfig {
	return MaterializerConfig{Interval: time.Minute, BatchSize: 100, Logger: slog.Default()}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c MaterializerConfig) Validate() error {
	const f = "reservation.MaterializerConfig."
	switch {
	case c.Interval < 100*time.Millisecond || c.Interval > time.Hour:
		return config.Invalid(f+"Interval", c.Interval, "want 100ms..1h")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..10000")
	case c.Logger == nil:
		return config.Invalid(f+"Logger", nil, "must be set")
	}
	return nil
}

// Materializer keeps every ACTIVE series' occurrences made into posts one
// horizon ahead (ServiceConfig.SeriesHorizon). Every serve instance runs
// one, without a lease: a series is extended in a transaction that holds
// its row, so a second instance waits and then finds nothing to do, and the
// (series, occurrence) key makes each occurrence a post once even so. A
// series whose instances were all down catches up at the next run: the
// occurrences missed meanwhile become posts then, late, and are published
// late or expire by their publishBy, as any late post.
type Materializer struct {
	startstop.BaseStartStop

	svc *Service
	cfg MaterializerConfig
}

// NewMaterializer returns a Materializer of svc's series.
func NewMaterializer(svc *Service, cfg MaterializerConfig) (*Materializer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if svc == nil {
		return nil, fmt.Errorf("invalid materializer config: %w", config.Invalid("reservation.MaterializerConfig.Service", nil, "must be set"))
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid materializer config: %w", err)
	}
	return &Materializer{svc: svc, cfg: cfg}, nil
}

// RunOnce extends the series that are due, BatchSize per transaction
// round, until none is left.
func (m *Materializer) RunOnce(ctx context.Context) (MaterializeResult, error) {
	var total MaterializeResult
	for {
		res, err := m.svc.MaterializeSeries(ctx, m.cfg.BatchSize)
		total.Series += res.Series
		total.Posts += res.Posts
		if err != nil || res.Series < m.cfg.BatchSize {
			return total, err
		}
	}
}

// Start runs at once and then once per Interval in one goroutine, until
// Stop or until ctx ends.
func (m *Materializer) Start(ctx context.Context) error {
	return m.StartLoop(ctx, "series materializer", m.loop)
}

// Stop ends the loop and waits for it. It is safe to call twice and
// without Start.
func (m *Materializer) Stop() { m.BaseStartStop.Stop() }

func (m *Materializer) loop(ctx context.Context) {
	log := m.cfg.Logger.With("component", "series")
	log.Info("series materializer started", "horizon", m.svc.cfg.SeriesHorizon, "interval", m.cfg.Interval)
	defer log.Info("series materializer stopped")
	for {
		res, err := m.RunOnce(ctx)
		if m.cfg.Observe != nil {
			m.cfg.Observe(res, err)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			log.Error("series materialization failed", "err", err)
		case res.Posts > 0:
			log.Info("series occurrences made into posts", "series", res.Series, "posts", res.Posts)
		}
		if !backoff.Sleep(ctx, m.cfg.Interval) {
			return
		}
	}
}
