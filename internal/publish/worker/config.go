package worker

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/telemetry"
)

// DefaultConsumer is the worker's name in the inbox table, the consumer
// group's default.
const DefaultConsumer = "posting-worker"

// Outcomes of consumed events, as given to Config.ObserveConsumed.
const (
	OutcomeProcessed = "processed"
	OutcomeDuplicate = "duplicate"
	// OutcomeOutOfOrder is an event dropped because the worker had applied
	// an event of its post with the same or a higher sequence.
	OutcomeOutOfOrder = "out_of_order"
	// OutcomeRefused is an event the worker refused because its database
	// contradicts it (see HandleBatch); Config.ObserveRefused is told why.
	OutcomeRefused = "refused"
	// OutcomeIgnored is an event that asks nothing of the worker (a CREATED
	// or UPDATED posting event, or one of an action it does not know):
	// acknowledged without a database statement, and not recorded in the
	// inbox.
	OutcomeIgnored = "ignored"
)

// Reasons of refused events, as given to Config.ObserveRefused.
const (
	// RefusedUnknownPost: the worker's database holds no post of the
	// event's key (a worker on another database than the service's, or a
	// message the service did not write).
	RefusedUnknownPost = "unknown_post"
	// RefusedUnknownSequence: the database never wrote the event with its
	// sequence: the sequence is beyond every outbox row the database wrote
	// for the post, or it is the id of a row of another event, or the
	// event's id is a row of another sequence, post or type, or, for an
	// event without a sequence, its id names no row of a post whose rows
	// remain.
	RefusedUnknownSequence = "unknown_sequence"
	// RefusedContradicted: the posts table says otherwise: a reservation
	// of a post still RESERVED (the service writes one only as the post
	// becomes WORKING), or a CANCELLED or EXPIRED posting event of a post
	// that is not CANCELLED or EXPIRED.
	RefusedContradicted = "contradicted"
)

// Outcomes of settled publications, as given to Config.ObserveSettled.
const (
	OutcomePublished = "published" // the post is PUBLISHED
	OutcomeCancelled = "cancelled" // the post was cancelled (or deleted) first
	OutcomeExpired   = "expired"   // the post was not published by its publishBy
	OutcomeFailed    = "failed"    // refused for good; the post stays WORKING
)

// DefaultConcurrency is Config.Concurrency's default. A slot is held only
// while one attempt runs (a few queries and at most one webhook request of
// WebhookConfig.Timeout), never while a publication waits, so slots are
// cheap: 64 keeps a minute's spike of posts flowing even while dozens of
// receivers hang for their whole timeout, and stays well below what one
// process can have in flight (database work still queues on the pool).
const DefaultConcurrency = 64

// MaxConcurrency is the upper limit of Config.Concurrency.
const MaxConcurrency = 256

// Config configures a Worker. Zero fields take defaults.
type Config struct {
	// Consumer is the worker's name in the inbox table; workers of one
	// consumer group must share it. Default "posting-worker".
	Consumer string
	// Publisher makes posts public. Default RecordOnly, logging to Logger.
	Publisher Publisher
	// Concurrency bounds the publication attempts in progress at once: an
	// attempt holds a slot while it claims the post (reads it again: still
	// WORKING, publishBy not passed) and makes one publisher call (one
	// webhook request), never while it waits for its time, for a slot or
	// for its next try. Default DefaultConcurrency (64); 1 to
	// MaxConcurrency (256).
	Concurrency int
	// RetryBase is the pause before trying a publication again after a
	// database error or a publisher's passing failure, doubled per failure
	// up to RetryMax. Default 1s.
	RetryBase time.Duration
	// RetryMax caps that pause. Default 1m; at least RetryBase. A pause the
	// publisher asks for (RetryLaterError) may be longer.
	RetryMax time.Duration
	// SweepInterval is how often the worker arms the PENDING publications
	// of its partitions that have no timer: rows an operator set back to
	// PENDING (a retry of a FAILED publication). Default 30s; 10ms to 1h.
	SweepInterval time.Duration
	// Now is the worker's own clock, for its timers only (shifted by its
	// difference from the database's clock): whether a publication is due,
	// and the times written to the database, come from the database's
	// clock (database.Now). Default time.Now.
	Now func() time.Time
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of handling an event and of a
	// publication, children of the trace context the event arrived with.
	// Default: the no-op provider (no spans; the trace context is still
	// kept with the publication).
	TracerProvider trace.TracerProvider
	// ObserveConsumed, if set, is told of every event the worker handled:
	// OutcomeProcessed, OutcomeDuplicate (a redelivery the inbox knew),
	// OutcomeOutOfOrder (older than one applied, dropped) or
	// OutcomeRefused (contradicted by the database, dropped) or
	// OutcomeIgnored (nothing to do).
	ObserveConsumed func(eventType, outcome string)
	// ObserveRefused, if set, is told of every event the worker refused,
	// by reason: RefusedUnknownPost, RefusedUnknownSequence or
	// RefusedContradicted.
	ObserveRefused func(reason string)
	// ObservePublished, if set, is told of every post the worker published,
	// with how long after its scheduledAt.
	ObservePublished func(lag time.Duration)
	// ObserveSettled, if set, is told of every publication this worker
	// settled: OutcomePublished, OutcomeCancelled, OutcomeExpired or
	// OutcomeFailed.
	ObserveSettled func(outcome string)
}

// DefaultConfig returns a Config with every field but Publisher and the
// observers at its default: the one place the defaults are written. A caller
// that takes values from elsewhere (a command line) starts from it, so that
// a zero it was given is refused by Validate rather than replaced.
func DefaultConfig() Config {
	return Config{
		Consumer:       DefaultConsumer,
		Concurrency:    DefaultConcurrency,
		RetryBase:      time.Second,
		RetryMax:       time.Minute,
		SweepInterval:  30 * time.Second,
		Now:            time.Now,
		Logger:         slog.Default(),
		TracerProvider: noop.NewTracerProvider(),
	}
}

func (c *Config) setDefaults() {
	config.FillZero(c, DefaultConfig())
	if c.Publisher == nil {
		c.Publisher = RecordOnly{Logger: c.Logger}
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "worker.Config."
	switch {
	case c.Consumer == "" || len(c.Consumer) > 100:
		return config.Invalid(f+"Consumer", c.Consumer, "want 1 to 100 characters")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return config.Invalid(f+"Concurrency", c.Concurrency, "want 1 to %d", MaxConcurrency)
	}
	// In the fields' order, so the setting named first is the first out.
	if err := backoff.CheckRetry(f, c.RetryBase, c.RetryMax); err != nil {
		return err
	}
	if c.SweepInterval < 10*time.Millisecond || c.SweepInterval > time.Hour {
		return config.Invalid(f+"SweepInterval", c.SweepInterval, "want 10ms to 1h")
	}
	return nil
}

// tracer is the worker's tracer.
func (w *Worker) tracer() trace.Tracer {
	return w.cfg.TracerProvider.Tracer(telemetry.ScopeName + "/worker")
}
