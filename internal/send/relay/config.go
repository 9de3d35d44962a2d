package relay

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
)

// Config configures a Relay. Zero fields take the defaults of the contract
// (DefaultConfig); MaxRetries is a pointer because zero retries is a setting
// of its own.
type Config struct {
	// InstanceID is written into claims and logs. Required; at most
	// MaxInstanceIDLen bytes. A claim's owner is InstanceID and a token of
	// this relay's run (see Owner), so that neither a restart nor a second
	// process given the same id takes another run's claims for its own.
	InstanceID string
	// Interval is the pause between polls. Default 5s; at least 10ms. A poll
	// whose batch came back full is followed at once by another.
	Interval time.Duration
	// BatchSize is the number of rows claimed per poll while there is no
	// backlog, and the least a poll counts as full. Default 100; 1..5000.
	BatchSize int
	// MaxBatchSize bounds the batch while polls come back full: each full
	// claim doubles the next one up to it, and polls that find less shrink
	// it back to BatchSize (see batchSizer). At or below BatchSize the batch
	// stays BatchSize. Default DefaultMaxBatchSize; 1..5000.
	MaxBatchSize int
	// MaxRetries is the number of retries after the first attempt: the
	// (1+MaxRetries)th failed attempt makes a row FAIL. Default (nil)
	// DefaultMaxRetries; 0..100. Retries(0) is zero retries.
	MaxRetries *int
	// StaleAfter is how long a claim may stay PROCESSING before another instance
	// recovers it. Default 2m; at least 1s and more than 2*Interval, and New
	// refuses one that does not exceed the sender's send bound (see
	// SendBounder) plus WriteTimeout by a quarter (a *StaleLimitError): a
	// healthy slow send would look dead and be sent again.
	StaleAfter time.Duration
	// WriteTimeout bounds the write of a batch's send results, which goes on
	// even when the relay is being stopped. Default 30s.
	WriteTimeout time.Duration
	// RetryBase is the delay before the first retry of a rejected row; each
	// further retry doubles it, with jitter, up to RetryMax. Default 1s.
	RetryBase time.Duration
	// RetryMax caps the retry delay. Default 5m; at least RetryBase.
	RetryMax time.Duration
	// OutageBackoffMax caps the pause between polls while the broker cannot be
	// reached; the pause starts at Interval and doubles. Default 30s.
	OutageBackoffMax time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the loop's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of a poll that claimed rows: "relay
	// poll" with its "outbox claim" and "outbox send", the send linked to
	// each row's trace context. Default: the no-op provider.
	TracerProvider trace.TracerProvider
	// Observe, if set, is called with the result of every poll, and of every
	// write of deferred acknowledgements outside a poll (for metrics).
	Observe func(Result, time.Duration, error)
}

// MaxInstanceIDLen bounds Config.InstanceID: with the run token (see
// Relay.Owner) the claim owner fits the outbox's claimed_by column (255).
const MaxInstanceIDLen = 200

// DefaultStaleAfter is the default of Config.StaleAfter.
const DefaultStaleAfter = 2 * time.Minute

// DefaultMaxRetries is the default of Config.MaxRetries.
const DefaultMaxRetries = 3

// DefaultConfig returns a Config with every field but InstanceID and Observe
// at its default: the one place the defaults are written. A caller that
// takes values from elsewhere (a command line) starts from it, so that a
// zero it was given is refused by Validate rather than replaced.
func DefaultConfig() Config {
	return Config{
		Interval:         5 * time.Second,
		BatchSize:        100,
		MaxBatchSize:     DefaultMaxBatchSize,
		MaxRetries:       Retries(DefaultMaxRetries),
		StaleAfter:       DefaultStaleAfter,
		WriteTimeout:     30 * time.Second,
		RetryBase:        time.Second,
		RetryMax:         5 * time.Minute,
		OutageBackoffMax: 30 * time.Second,
		Now:              time.Now,
		Logger:           slog.Default(),
		TracerProvider:   noop.NewTracerProvider(),
	}
}

// Retries returns n for Config.MaxRetries.
func Retries(n int) *int { return &n }

func (c *Config) setDefaults() {
	// An outage's backoff starts at the interval: with an interval longer
	// than the default cap, the cap is the interval (polls no less often
	// than usual), not a refusal of a setting the operator cannot set.
	if c.OutageBackoffMax == 0 && c.Interval > DefaultConfig().OutageBackoffMax {
		c.OutageBackoffMax = c.Interval
	}
	config.FillZero(c, DefaultConfig())
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "relay.Config."
	switch {
	case c.InstanceID == "":
		return config.Invalid(f+"InstanceID", c.InstanceID, "required")
	case len(c.InstanceID) > MaxInstanceIDLen:
		return config.Invalid(f+"InstanceID", c.InstanceID, "longer than %d bytes", MaxInstanceIDLen)
	case !utf8.ValidString(c.InstanceID) || strings.ContainsRune(c.InstanceID, 0):
		return config.Invalid(f+"InstanceID", c.InstanceID, "must be UTF-8 text without NUL (claimed_by is a text column)")
	case c.Interval < 10*time.Millisecond:
		return config.Invalid(f+"Interval", c.Interval, "below 10ms")
	case c.BatchSize < 1 || c.BatchSize > 5000:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..5000")
	case c.MaxBatchSize < 1 || c.MaxBatchSize > 5000:
		return config.Invalid(f+"MaxBatchSize", c.MaxBatchSize, "want 1..5000")
	case c.MaxRetries != nil && (*c.MaxRetries < 0 || *c.MaxRetries > 100):
		return config.Invalid(f+"MaxRetries", *c.MaxRetries, "want 0..100")
	case c.StaleAfter < time.Second || c.StaleAfter <= 2*c.Interval:
		return config.Invalid(f+"StaleAfter", c.StaleAfter, "must be at least 1s and more than twice the interval (%s)", c.Interval)
	case c.WriteTimeout <= 0:
		return config.Invalid(f+"WriteTimeout", c.WriteTimeout, "must be positive")
	}
	// In the fields' order, so the setting named first is the first out.
	if err := backoff.CheckRetry(f, c.RetryBase, c.RetryMax); err != nil {
		return err
	}
	if c.OutageBackoffMax < c.Interval {
		return config.Invalid(f+"OutageBackoffMax", c.OutageBackoffMax, "below the interval %s", c.Interval)
	}
	return nil
}

// StaleLimitError is why New refuses a StaleAfter that a healthy claim could
// outlast: the sender's send bound plus WriteTimeout, and a quarter more
// for the claim's own transaction and the clocks' reading. New returns it
// as the Err of a *config.Error naming relay.Config.StaleAfter.
type StaleLimitError struct {
	// StaleAfter is the refused value; Min is the least StaleAfter above it.
	StaleAfter, Min time.Duration
	// SendBound and WriteTimeout are what Min is made of.
	SendBound, WriteTimeout time.Duration
}

func (e *StaleLimitError) Error() string {
	return fmt.Sprintf("must be more than %s: a send may take %s and the write of its results %s, plus a quarter",
		e.Min, e.SendBound, e.WriteTimeout)
}

// MinStaleAfter returns the least StaleAfter a relay accepts for a
// sender whose sends take up to sendBound and the given WriteTimeout
// (0: the default): StaleAfter must be more than it.
func MinStaleAfter(sendBound, writeTimeout time.Duration) time.Duration {
	if writeTimeout == 0 {
		writeTimeout = 30 * time.Second
	}
	return (sendBound + writeTimeout) * 5 / 4
}

// ValidateFor is Validate for a relay whose sender's sends take up to
// sendBound (its SendBounder; 0: unbounded): it also refuses a StaleAfter
// such a send could outlast, as New does, so a caller can check before it
// builds the sender. Like Validate, it fills no default: a zero is refused.
func (c Config) ValidateFor(sendBound time.Duration) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return c.checkStaleAfter(sendBound)
}

// checkStaleAfter refuses a StaleAfter that a send of up to sendBound and
// the write of its results could outlast (a *StaleLimitError).
func (c Config) checkStaleAfter(sendBound time.Duration) error {
	if sendBound <= 0 {
		return nil
	}
	if min := MinStaleAfter(sendBound, c.WriteTimeout); c.StaleAfter <= min {
		return &config.Error{Field: "relay.Config.StaleAfter", Value: c.StaleAfter,
			Err: &StaleLimitError{StaleAfter: c.StaleAfter, Min: min, SendBound: sendBound, WriteTimeout: c.WriteTimeout}}
	}
	return nil
}
