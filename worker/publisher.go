package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/postingsvc/posting/reservation"
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

// Publisher makes a post public at its time.
type Publisher interface {
	// Publish makes p public. nil means done; an error wrapping ErrRefused
	// means never; any other error means try again later. It may be called
	// again for a post it already published (the worker stopped between
	// publishing and recording it), always with the same Key.
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
	// URL receives a POST per publication (POSTING_PUBLISH_WEBHOOK_URL).
	// Required; http or https.
	URL string
	// Timeout bounds one request. Default 10s; 100ms to 5m.
	Timeout time.Duration
	// MaxAttempts bounds the requests of one Publish; the worker calls
	// Publish again later if all fail. Default 5; 1 to 100.
	MaxAttempts int
	// RetryBase is the pause after the first failed request, doubled per
	// failure (with jitter) up to RetryMax. Default 500ms.
	RetryBase time.Duration
	// RetryMax caps the pause. Default 30s; at least RetryBase.
	RetryMax time.Duration
	// Client sends the requests. Default a client with no overall timeout
	// (Timeout bounds each request).
	Client *http.Client
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.RetryBase == 0 {
		c.RetryBase = 500 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 30 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	return c
}

// Validate reports the first setting out of its limits.
func (c WebhookConfig) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("no URL")
	case err != nil:
		return fmt.Errorf("URL %q: %w", c.URL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("URL %q: want http or https", c.URL)
	case u.Host == "":
		return fmt.Errorf("URL %q: no host", c.URL)
	case c.Timeout < 100*time.Millisecond || c.Timeout > 5*time.Minute:
		return fmt.Errorf("timeout %s: want 100ms to 5m", c.Timeout)
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return fmt.Errorf("max attempts %d: want 1 to 100", c.MaxAttempts)
	case c.RetryBase <= 0 || c.RetryMax < c.RetryBase:
		return fmt.Errorf("retry pauses base %s, max %s: need 0 < base <= max", c.RetryBase, c.RetryMax)
	}
	return nil
}

// Webhook publishes by POSTing the post's JSON (as the API shows it, status
// PUBLISHED) to a URL, with the headers Idempotency-Key (the publication's
// Key) and Content-Type: application/json. A 2xx answer is success; 408, 429
// and 5xx answers and network errors are retried with exponential backoff;
// any other answer is a refusal (ErrRefused). Delivery is at least once:
// the receiver drops repeats by Idempotency-Key.
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

// Publish POSTs p until the receiver accepts or refuses it, MaxAttempts
// requests have failed, or ctx ends.
func (h *Webhook) Publish(ctx context.Context, p Publishing) error {
	body, err := json.Marshal(p.Post.JSON())
	if err != nil {
		return fmt.Errorf("%w: encode post %d: %v", ErrRefused, p.Post.ID, err)
	}
	pause := h.cfg.RetryBase
	var last error
	for attempt := 1; attempt <= h.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			half := pause / 2
			t := time.NewTimer(half + rand.N(pause-half+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("webhook: %w (after: %w)", ctx.Err(), last)
			case <-t.C:
			}
			pause = min(2*pause, h.cfg.RetryMax)
		}
		last = h.post(ctx, body, p.Key)
		if last == nil || errors.Is(last, ErrRefused) {
			return last
		}
	}
	return fmt.Errorf("webhook: %d attempts failed, last: %w", h.cfg.MaxAttempts, last)
}

// post sends one request.
func (h *Webhook) post(ctx context.Context, body []byte, key string) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: webhook request: %v", ErrRefused, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
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
		return fmt.Errorf("webhook %s answered %d: %s", h.cfg.URL, code, bytes.TrimSpace(snippet))
	default:
		return fmt.Errorf("%w: webhook %s answered %d: %s", ErrRefused, h.cfg.URL, code, bytes.TrimSpace(snippet))
	}
}
