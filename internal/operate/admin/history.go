package admin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Defaults and limits of HistoryConfig.
const (
	// DefaultHistoryInterval is the time between two samples.
	DefaultHistoryInterval = 10 * time.Second
	// DefaultHistoryWindow is how far back the samples reach.
	DefaultHistoryWindow = 30 * time.Minute
	// MaxHistorySamples bounds Window/Interval, and so the memory and the
	// size of GET /admin/outbox/history.
	MaxHistorySamples = 10_000
)

// HistoryConfig configures a History.
type HistoryConfig struct {
	// DB is the database whose outbox is sampled. Required.
	DB *gorm.DB
	// Interval is the time between two samples. Default
	// DefaultHistoryInterval (10s); 100ms to 10m.
	Interval time.Duration
	// Window is how far back the kept samples reach: Window/Interval
	// samples are kept, the oldest dropped first. Default
	// DefaultHistoryWindow (30m); at least Interval, at most
	// MaxHistorySamples samples.
	Window time.Duration
	// Now, if set, replaces the database's clock for the sample times and
	// the oldest waiting age; tests set it.
	Now func() time.Time
	// Logger receives failed samples. Default slog.Default().
	Logger *slog.Logger
}

func (c *HistoryConfig) setDefaults() {
	config.FillZero(c, HistoryConfig{Interval: DefaultHistoryInterval, Window: DefaultHistoryWindow,
		Logger: slog.Default()})
}

// Validate reports a missing or out-of-range setting, as a *config.Error
// naming the field.
func (c HistoryConfig) Validate() error {
	const f = "admin.HistoryConfig."
	switch {
	case c.DB == nil:
		return config.Invalid(f+"DB", nil, "must be set")
	case c.Interval < 100*time.Millisecond || c.Interval > 10*time.Minute:
		return config.Invalid(f+"Interval", c.Interval, "want 100ms..10m")
	case c.Window < c.Interval:
		return config.Invalid(f+"Window", c.Window, "want at least Interval (%s)", c.Interval)
	case c.Window/c.Interval > MaxHistorySamples:
		return config.Invalid(f+"Window", c.Window, "more than %d samples of %s", MaxHistorySamples, c.Interval)
	}
	return nil
}

// Sample is the outbox at one moment, as the console's chart draws it.
type Sample struct {
	// At is when the sample was taken, by the database's clock.
	At time.Time `json:"at"`
	// Counts has every status, zero included (FAIL counts discarded rows).
	Counts map[outbox.Status]int64 `json:"counts"`
	// Failed is the FAIL rows not discarded.
	Failed int64 `json:"failed"`
	// Blocked is the PENDING and RETRY rows held by a FAIL row.
	Blocked int64 `json:"blocked"`
	// OldestWaitingSeconds is the age of the oldest PENDING or RETRY row;
	// null when none waits.
	OldestWaitingSeconds *float64 `json:"oldestWaitingSeconds"`
}

// History samples the outbox every Interval and keeps the last Window of
// samples in memory, so the console's chart has a past when it opens. Each
// instance keeps its own; they agree up to the moments they sample, as the
// outbox is shared.
type History struct {
	startstop.BaseStartStop
	cfg HistoryConfig

	mu   sync.Mutex
	ring []Sample // len grows to cap, then next wraps
	next int
}

// NewHistory returns a History with no samples; Start begins sampling.
func NewHistory(cfg HistoryConfig) (*History, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid admin history config: %w", err)
	}
	return &History{cfg: cfg, ring: make([]Sample, 0, int(cfg.Window/cfg.Interval))}, nil
}

// Config is the configuration in use, defaults filled in.
func (h *History) Config() HistoryConfig { return h.cfg }

// RunOnce takes one sample and keeps it.
func (h *History) RunOnce(ctx context.Context) (Sample, error) {
	now, err := h.now(ctx)
	if err != nil {
		return Sample{}, err
	}
	st, err := outbox.Stats(ctx, h.cfg.DB, now)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{At: now.UTC(), Counts: st.Counts, Failed: st.Failed, Blocked: st.Blocked}
	if st.OldestWaiting != nil {
		age := st.OldestWaiting.AgeSeconds
		s.OldestWaitingSeconds = &age
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) < cap(h.ring) {
		h.ring = append(h.ring, s)
	} else {
		h.ring[h.next] = s
		h.next = (h.next + 1) % len(h.ring)
	}
	return s, nil
}

// Samples returns the kept samples, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Sample, 0, len(h.ring))
	out = append(out, h.ring[h.next:]...)
	return append(out, h.ring[:h.next]...)
}

// Start samples at once and then every Interval, in one goroutine, until
// Stop is called or ctx ends.
func (h *History) Start(ctx context.Context) error {
	return h.StartLoop(ctx, "admin history", h.loop)
}

// Stop ends the loop and waits for it; safe twice and without Start.
func (h *History) Stop() { h.BaseStartStop.Stop() }

func (h *History) loop(ctx context.Context) {
	log := h.cfg.Logger.With("component", "admin_history")
	failing := false
	for {
		_, err := h.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			// Once per run of failures: the console shows the gap.
			log.Warn("outbox sample failed", "err", err, "interval", h.cfg.Interval)
			failing = true
		case err == nil && failing:
			log.Info("outbox sampling recovered")
			failing = false
		}
		if !backoff.Sleep(ctx, h.cfg.Interval) {
			return
		}
	}
}

func (h *History) now(ctx context.Context) (time.Time, error) {
	if h.cfg.Now != nil {
		return h.cfg.Now(), nil
	}
	return database.Now(ctx, h.cfg.DB)
}
