package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/telemetry"
)

// ErrRefused marks a publication the publisher refused for good (a webhook
// answering 4xx): trying again cannot help. The worker records the
// publication FAILED with the error and leaves the post WORKING.
var ErrRefused = errors.New("publication refused")

// Publishing is what a Publisher is asked to make public.
type Publishing struct {
	// Post is the post as it will be recorded: status PUBLISHED, PublishedAt set.
	Post reservation.Post
	// Key is the same for every attempt at this post's publication (the id of
	// its reservation event): a receiver drops a repeat by it.
	Key string
}

// RetryLaterError is a passing failure after which the receiver asked for a
// pause (an HTTP Retry-After): the worker waits at least After before it
// tries the publication again.
type RetryLaterError struct {
	After time.Duration
	Err   error
}

// Error names the failure and the pause asked for.
func (e *RetryLaterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}

// Unwrap returns the failure, so errors.Is and errors.As see through the pause.
func (e *RetryLaterError) Unwrap() error { return e.Err }

// Publisher makes a post public at its time.
type Publisher interface {
	// Publish makes one attempt at making p public (one webhook request):
	// the worker owns the retry schedule, and holds a concurrency slot only
	// while Publish runs, so Publish must not wait to try again itself.
	// nil means done; an error wrapping ErrRefused means never; any other
	// error means try again later (after at least RetryLaterError.After if
	// it wraps one). It may be called again for a post it already
	// published (the worker stopped between publishing and recording it),
	// always with the same Key.
	Publish(ctx context.Context, p Publishing) error
}

// RecordOnly is the default Publisher: the publication is the worker's own
// record of it, the post PUBLISHED with publishedAt and its publications row,
// written in one transaction after Publish, plus a log line. Nothing leaves
// the service.
type RecordOnly struct {
	// Logger receives one line per publication; nil logs nothing.
	Logger *slog.Logger
}

// Publish logs the publication.
func (r RecordOnly) Publish(_ context.Context, p Publishing) error {
	if r.Logger != nil {
		r.Logger.Info("post published", "component", "worker", "post_id", p.Post.ID, "title", p.Post.Title,
			"scheduled_at", p.Post.ScheduledAt, "published_at", p.Post.PublishedAt)
	}
	return nil
}

// WebhookConfig configures a Webhook. Zero fields but URL take defaults.
type WebhookConfig struct {
	// URL receives a POST per publication. Required; http or https.
	URL string
	// Timeout bounds one request, and so how long a hanging receiver holds
	// one of the worker's slots. Default 10s; 100ms to 5m.
	Timeout time.Duration
	// Client sends the requests. Default a client with no overall timeout
	// (Timeout bounds each request).
	Client *http.Client
}

// DefaultWebhookConfig returns a WebhookConfig with every field but URL at
// its default: the one place the defaults are written. A caller that takes
// values from elsewhere (a command line) starts from it.
func DefaultWebhookConfig() WebhookConfig {
	// Go's default transport keeps 2 idle connections per host: with
	// Concurrency requests in flight at a spike, the rest would be opened
	// and closed per request. Keep as many as the worker may use.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = MaxConcurrency
	return WebhookConfig{Timeout: 10 * time.Second, Client: &http.Client{Transport: t}}
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	config.FillZero(&c, DefaultWebhookConfig())
	return c
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c WebhookConfig) Validate() error {
	const f = "worker.WebhookConfig."
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return config.Invalid(f+"URL", c.URL, "required")
	case err != nil:
		return config.Invalid(f+"URL", c.URL, "%w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return config.Invalid(f+"URL", c.URL, "want http or https")
	case u.Host == "":
		return config.Invalid(f+"URL", c.URL, "no host")
	case c.Timeout < 100*time.Millisecond || c.Timeout > 5*time.Minute:
		return config.Invalid(f+"Timeout", c.Timeout, "want 100ms to 5m")
	}
	return nil
}

// maxRetryAfter bounds the pause a receiver's Retry-After can impose.
const maxRetryAfter = time.Hour

// Webhook publishes by POSTing the post's JSON (as the API shows it, status
// PUBLISHED) to a URL, with the headers Idempotency-Key (the publication's
// Key) and Content-Type: application/json. A 2xx answer is success; 408, 429
// and 5xx answers and network errors are passing failures, which the worker
// tries again later (a 429 or 503 with Retry-After not before it says, up
// to an hour); any other answer is a refusal (ErrRefused). Delivery is at
// least once: the receiver drops repeats by Idempotency-Key.
type Webhook struct {
	cfg WebhookConfig
}

// NewWebhook returns a Webhook publisher.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid webhook config: %w", err)
	}
	return &Webhook{cfg: cfg}, nil
}

// Publish POSTs p once, bounded by Timeout.
func (h *Webhook) Publish(ctx context.Context, p Publishing) error {
	body, err := json.Marshal(api.NewPostJSON(&p.Post))
	if err != nil {
		return fmt.Errorf("%w: encode post %d: %v", ErrRefused, p.Post.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: webhook request: %v", ErrRefused, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", p.Key)
	if tp := telemetry.Traceparent(ctx); tp != "" {
		// The receiver continues the publication's trace.
		req.Header.Set(event.HeaderTraceparent, tp)
	}
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", h.cfg.URL, err)
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512)) // for the error only
	_ = resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		err := fmt.Errorf("webhook %s answered %d: %s", h.cfg.URL, code, bytes.TrimSpace(snippet))
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok &&
			(code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) {
			return &RetryLaterError{After: after, Err: err}
		}
		return err
	default:
		return fmt.Errorf("%w: webhook %s answered %d: %s", ErrRefused, h.cfg.URL, code, bytes.TrimSpace(snippet))
	}
}

// retryAfter reads a Retry-After header (RFC 9110: delay-seconds or an
// HTTP-date), capped at maxRetryAfter.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	} else {
		return 0, false
	}
	return min(max(d, 0), maxRetryAfter), true
}
