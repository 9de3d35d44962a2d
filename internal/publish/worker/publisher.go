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

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/publish/webhook"
	"github.com/postingsvc/posting/internal/write/reservation"
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
	// Attempt is this attempt's number: 1 for the first, then one more
	// after each failed attempt (the publication's attempts plus one).
	Attempt int
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
	// Client sends the requests; redirects are never followed, whatever its
	// CheckRedirect. Default a client with no overall timeout (Timeout
	// bounds each request).
	Client *http.Client
	// Secret, when set, signs every call per the Standard Webhooks
	// specification: "whsec_" + a base64 key of 24 to 64 bytes, or several
	// space-separated (each signs, for a receiver moving to a new one).
	// Default "": calls are not signed.
	Secret string
	// RedirectAttempts is how many attempts answered with a redirect (3xx)
	// a publication may spend before it is refused for good: a redirect is
	// never followed (it would deliver somewhere else, or drop the body),
	// and is tried again on the worker's schedule in case it was passing.
	// Default 5; 1 to 100.
	RedirectAttempts int
	// Now is the clock of webhook-timestamp. Default time.Now.
	Now func() time.Time
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
	return WebhookConfig{Timeout: 10 * time.Second, Client: &http.Client{Transport: t}, RedirectAttempts: 5, Now: time.Now}
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	config.FillZero(&c, DefaultWebhookConfig())
	return c
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c WebhookConfig) Validate() error {
	const f = "worker.WebhookConfig."
	u, err := config.ParseURL(c.URL) // its error quotes no password
	switch {
	case c.URL == "":
		return config.Invalid(f+"URL", c.URL, "required")
	case err != nil:
		return config.Invalid(f+"URL", config.RedactURL(c.URL), "%w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return config.Invalid(f+"URL", config.RedactURL(c.URL), "want http or https")
	case u.Host == "":
		return config.Invalid(f+"URL", config.RedactURL(c.URL), "no host")
	case c.Timeout < 100*time.Millisecond || c.Timeout > 5*time.Minute:
		return config.Invalid(f+"Timeout", c.Timeout, "want 100ms to 5m")
	case c.RedirectAttempts < 1 || c.RedirectAttempts > 100:
		return config.Invalid(f+"RedirectAttempts", c.RedirectAttempts, "want 1 to 100")
	}
	if c.Secret != "" {
		if _, err := webhook.NewSigner(c.Secret); err != nil {
			// The value is a secret: the reason names which one, not it.
			return config.Invalid(f+"Secret", "<hidden>", "%v", err)
		}
	}
	return nil
}

// maxRetryAfter bounds the pause a receiver's Retry-After can impose.
const maxRetryAfter = time.Hour

// Webhook publishes by POSTing a webhook.Body (the post, status PUBLISHED)
// to a URL, with the headers Idempotency-Key (the publication's Key) and
// Content-Type: application/json, and with a Secret the Standard Webhooks
// headers (webhook-id = the Key). A 2xx answer is success; 408, 429 and 5xx
// answers and network errors are passing failures, which the worker tries
// again later (a 429 or 503 with Retry-After not before it says, up to an
// hour); a redirect is not followed and is a passing failure until
// RedirectAttempts, then a refusal; any other answer is a refusal
// (ErrRefused). Delivery is at least once: the receiver drops repeats by
// Idempotency-Key.
type Webhook struct {
	cfg    WebhookConfig
	signer *webhook.Signer // nil: calls are not signed
	// name is the URL as errors show it: its password hidden, since errors
	// reach logs and the publication's last_error.
	name string
}

// NewWebhook returns a Webhook publisher.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid webhook config: %w", err)
	}
	h := &Webhook{cfg: cfg, name: config.RedactURL(cfg.URL)}
	if cfg.Secret != "" {
		var err error
		if h.signer, err = webhook.NewSigner(cfg.Secret); err != nil {
			return nil, fmt.Errorf("invalid webhook config: %w", err)
		}
	}
	// Go's client follows a 301/302/303 as a GET without the body, and a
	// 307/308 to wherever it points: either way the 2xx that ends it would
	// record a publication the configured receiver never got.
	client := *cfg.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	h.cfg.Client = &client
	return h, nil
}

// Publish POSTs p once, bounded by Timeout.
func (h *Webhook) Publish(ctx context.Context, p Publishing) error {
	b, err := webhook.NewBody(&p.Post)
	if err != nil {
		return fmt.Errorf("%w: post %d: %v", ErrRefused, p.Post.ID, err)
	}
	body, err := json.Marshal(b)
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
	if h.signer != nil {
		at := h.cfg.Now()
		req.Header.Set(webhook.HeaderID, p.Key)
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
		req.Header.Set(webhook.HeaderSignature, h.signer.Sign(p.Key, at, body))
	}
	if tp := telemetry.Traceparent(ctx); tp != "" {
		// The receiver continues the publication's trace.
		req.Header.Set(event.HeaderTraceparent, tp)
	}
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		// The client's *url.Error repeats the URL with only its password
		// masked, a token in its query shown: h.name names it redacted.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook %s: %w", h.name, err)
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512)) // for the error only
	_ = resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case code >= 300 && code < 400:
		err := fmt.Errorf("webhook %s answered %d redirecting to Location %q, which is not followed: set the webhook URL to the receiver's own address",
			h.name, code, resp.Header.Get("Location"))
		if p.Attempt >= h.cfg.RedirectAttempts {
			return fmt.Errorf("%w: %v (attempt %d of %d)", ErrRefused, err, p.Attempt, h.cfg.RedirectAttempts)
		}
		return err
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		err := fmt.Errorf("webhook %s answered %d: %s", h.name, code, bytes.TrimSpace(snippet))
		if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok &&
			(code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) {
			return &RetryLaterError{After: after, Err: err}
		}
		return err
	default:
		return fmt.Errorf("%w: webhook %s answered %d: %s", ErrRefused, h.name, code, bytes.TrimSpace(snippet))
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
