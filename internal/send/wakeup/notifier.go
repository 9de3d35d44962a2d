package wakeup

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/startstop"
)

// DefaultNotifyWindow is NotifierConfig.Window's default: a burst of
// commits costs one NOTIFY per 10 ms (at most 100/s) however many writers
// commit, and the other instances' relays hear of the first commit at once
// and of the later ones within 10 ms.
const DefaultNotifyWindow = 10 * time.Millisecond

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Send runs NOTIFY once, outside any transaction, on a pooled
	// connection (outbox.Announce on the instance's pool). Required.
	Send func(ctx context.Context) error
	// Window is the least time between two sends. Default
	// DefaultNotifyWindow; 1ms..1s.
	Window time.Duration
	// Logger receives failed sends. Default slog.Default().
	Logger *slog.Logger
}

// DefaultNotifierConfig returns a NotifierConfig with every optional field
// at its default.
func DefaultNotifierConfig() NotifierConfig {
	return NotifierConfig{Window: DefaultNotifyWindow, Logger: slog.Default()}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c NotifierConfig) Validate() error {
	const f = "wakeup.NotifierConfig."
	switch {
	case c.Send == nil:
		return config.Invalid(f+"Send", nil, "required")
	case c.Window < time.Millisecond || c.Window > time.Second:
		return config.Invalid(f+"Window", c.Window, "must be 1ms..1s")
	}
	return nil
}

// Notifier tells the other instances' relays that outbox rows were
// committed: Notify, called after a commit (the commit waker of
// database.WithCommitWaker), never blocks the writer; the Notifier's own
// goroutine sends one NOTIFY for every request made since its last send, at
// most one per Window. A failed send is logged and dropped: the relays'
// polling is the safety net.
type Notifier struct {
	startstop.BaseStartStop
	cfg     NotifierConfig
	pending chan struct{}
	// sent, if set, is called after each send (tests count them).
	sent func(error)
}

// NewNotifier returns a Notifier.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	config.FillZero(&cfg, DefaultNotifierConfig())
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid wakeup notifier config: %w", err)
	}
	return &Notifier{cfg: cfg, pending: make(chan struct{}, 1)}, nil
}

// Notify asks for a NOTIFY. It never blocks; requests made before the
// Notifier's goroutine takes the last one make one send.
func (n *Notifier) Notify() {
	select {
	case n.pending <- struct{}{}:
	default:
	}
}

// Start runs the notifier in one goroutine until Stop is called or ctx ends.
func (n *Notifier) Start(ctx context.Context) error {
	return n.StartLoop(ctx, "wakeup notifier", n.loop)
}

func (n *Notifier) loop(ctx context.Context) {
	log := n.cfg.Logger.With("component", "wakeup_notifier")
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.pending:
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.cfg.Send(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			if failures++; failures == 1 || failures%100 == 0 {
				log.Warn("outbox notification not sent; other instances' relays find the rows at their next poll",
					"err", err, "failures", failures)
			}
		} else if err == nil {
			failures = 0
		}
		if n.sent != nil {
			n.sent(err)
		}
		if !backoff.Sleep(ctx, n.cfg.Window) {
			return
		}
	}
}
