package worker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/platform/nodetest"
	"github.com/postingsvc/posting/internal/publish/webhook"
	"github.com/postingsvc/posting/internal/publish/webhook/webhooktest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// A redirect is never followed: a receiver answering 302 or 307 towards a
// server that would answer 200 leaves the post WORKING, never PUBLISHED; the
// redirect is tried again on the worker's schedule and after
// RedirectAttempts the publication is FAILED, its last_error and the log
// lines naming the Location. The server redirected to gets nothing.
func TestWebhookRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var reached atomic.Int64
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			reached.Add(1)
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(target.Close)
		for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
			var asked atomic.Int64
			redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				http.Redirect(w, r, target.URL+"/moved", code)
			}))
			t.Cleanup(redirect.Close)
			w, logs := webhookWorker(t, db.DB, worker.WebhookConfig{URL: redirect.URL, RedirectAttempts: 3})

			post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
			require.NoError(t, w.Handle(context.Background(), decode(t, reservationRecord(t, post), 0)))
			require.Eventually(t, func() bool { return loadPublication(t, db.DB, post.ID).Status == worker.PublicationFailed },
				30*time.Second, 20*time.Millisecond, "answered %d", code)
			require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, post.ID).Status, "answered %d", code)
			p := loadPublication(t, db.DB, post.ID)
			require.Equal(t, 3, p.Attempts)
			require.EqualValues(t, 3, asked.Load())
			require.Contains(t, *p.LastError, `Location "`+target.URL+`/moved"`)
			require.Contains(t, logs.String(), "publication failed; trying again")
			// The loop logs after the FAILED row committed: wait for the line.
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "publication refused for good") },
				30*time.Second, 20*time.Millisecond)
			require.Equal(t, 3, strings.Count(logs.String(), target.URL+"/moved"), "each attempt's log line names the Location")
		}
		require.Zero(t, reached.Load(), "the redirect was followed")
	})
}

// call is one webhook request as the receiver got it.
type call struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server answering 200 to every call and keeping it.
type receiver struct {
	URL   string
	mu    sync.Mutex
	calls []call
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.calls = append(rc.calls, call{header: r.Header.Clone(), body: body})
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *receiver) all() []call {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]call(nil), rc.calls...)
}

// publishOne publishes one overdue post through hook and returns the call
// the receiver got for it.
func publishOne(t *testing.T, db *gorm.DB, hook *worker.Webhook, rc *receiver) (*reservation.Post, call) {
	t.Helper()
	w := newWorker(t, db, hook)
	post := reservationtest.InsertWorking(t, db, time.Now().Add(-time.Second))
	rec := reservationRecord(t, post)
	require.NoError(t, w.Handle(context.Background(), decode(t, rec, 0)))
	awaitPublished(t, db, post)
	var got []call
	for _, c := range rc.all() {
		if c.header.Get("Idempotency-Key") == rec.Headers[event.HeaderEventID] {
			got = append(got, c)
		}
	}
	require.Len(t, got, 1)
	return post, got[0]
}

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// verifyCase is one call given to the standardwebhooks library.
type verifyCase struct {
	Name    string            `json:"name"`
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"` // base64 of the exact bytes
}

func newVerifyCase(name, secret string, c call) verifyCase {
	h := map[string]string{}
	for k := range c.header {
		h[strings.ToLower(k)] = c.header.Get(k)
	}
	return verifyCase{Name: name, Secret: secret, Headers: h, Body: base64.StdEncoding.EncodeToString(c.body)}
}

// verifyWithStandardWebhooks runs the official standardwebhooks npm library
// over the cases and returns each case's outcome: "ok" or its error.
func verifyWithStandardWebhooks(t *testing.T, cases []verifyCase) map[string]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cases.json")
	raw, err := json.Marshal(cases)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	res := nodetest.Run(t, 2*time.Minute, []string{"CASES=" + path}, "internal/publish/worker/testdata/standardwebhooks-verify.js")
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	out := map[string]string{}
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &out), res.Stdout)
	return out
}

// asyncAPIWebhookHeaders returns a check of a call's headers against the
// AsyncAPI document's webhookHeaders schema (draft 07, formats asserted):
// each header the schema names, as sent.
func asyncAPIWebhookHeaders(t *testing.T) func(http.Header) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.AsyncAPIDocument()))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	require.NoError(t, c.AddResource("asyncapi.json", doc))
	schema, err := c.Compile("asyncapi.json#/components/schemas/webhookHeaders")
	require.NoError(t, err)
	var raw struct {
		Components struct {
			Schemas struct {
				WebhookHeaders struct {
					Properties map[string]any `json:"properties"`
				} `json:"webhookHeaders"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(event.AsyncAPIDocument(), &raw))
	return func(h http.Header) error {
		m := map[string]any{}
		for name := range raw.Components.Schemas.WebhookHeaders.Properties {
			if v := h.Values(name); len(v) > 0 {
				m[name] = strings.Join(v, ", ")
			}
		}
		return schema.Validate(m)
	}
}

// Real calls of the worker, signed with POSTING_WEBHOOK_SECRET's secrets,
// are verified by the official standardwebhooks library as a receiver runs
// it: a call verifies with its secret, and with each of two secrets while
// both are set; a changed body, another secret, or a timestamp older than
// the library's tolerance (5 minutes) does not. webhook-id is the
// Idempotency-Key; an unsigned webhook sends no webhook-* header.
func TestWebhookCallsVerifyWithStandardWebhooks(t *testing.T) {
	t.Parallel()
	nodetest.Require(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		rc := newReceiver(t)
		a, b, other := newSecret(t), newSecret(t), newSecret(t)
		hook := func(secret string, now func() time.Time) *worker.Webhook {
			h, err := worker.NewWebhook(worker.WebhookConfig{URL: rc.URL, Secret: secret, Now: now})
			require.NoError(t, err)
			return h
		}
		_, single := publishOne(t, db.DB, hook(a, nil), rc)
		_, pair := publishOne(t, db.DB, hook(a+" "+b, nil), rc)
		_, old := publishOne(t, db.DB, hook(a, func() time.Time { return time.Now().Add(-10 * time.Minute) }), rc)
		_, unsigned := publishOne(t, db.DB, hook("", nil), rc)

		for _, c := range []call{single, pair, old} {
			require.Equal(t, c.header.Get("Idempotency-Key"), c.header.Get(webhook.HeaderID))
		}
		require.Len(t, strings.Fields(pair.header.Get(webhook.HeaderSignature)), 2)
		headers := asyncAPIWebhookHeaders(t)
		for name, c := range map[string]call{"single": single, "pair": pair, "unsigned": unsigned} {
			require.NoError(t, headers(c.header), "%s: the headers the AsyncAPI document describes", name)
		}
		for _, h := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
			require.Empty(t, unsigned.header.Get(h))
		}
		changed := single
		changed.body = bytes.Replace(single.body, []byte(`"title":"t"`), []byte(`"title":"T"`), 1)
		require.NotEqual(t, single.body, changed.body)

		got := verifyWithStandardWebhooks(t, []verifyCase{
			newVerifyCase("single", a, single),
			newVerifyCase("single, another secret", other, single),
			newVerifyCase("single, body changed", a, changed),
			newVerifyCase("pair, first secret", a, pair),
			newVerifyCase("pair, second secret", b, pair),
			newVerifyCase("old timestamp", a, old),
			newVerifyCase("unsigned", a, unsigned),
		})
		require.Equal(t, map[string]string{
			"single":                 "ok",
			"single, another secret": "No matching signature found",
			"single, body changed":   "No matching signature found",
			"pair, first secret":     "ok",
			"pair, second secret":    "ok",
			"old timestamp":          "Message timestamp too old",
			"unsigned":               "Missing required headers",
		}, got)
	})
}

// Every body the worker really sends validates against the webhook's JSON
// Schema (webhook.Schema, the OpenAPI document's PublishedPost), with the
// post's own values.
func TestWebhookBodyMatchesItsSchema(t *testing.T) {
	t.Parallel()
	schema := webhooktest.Schema(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		rc := newReceiver(t)
		hook, err := worker.NewWebhook(worker.WebhookConfig{URL: rc.URL})
		require.NoError(t, err)
		post, got := publishOne(t, db.DB, hook, rc)
		webhooktest.RequireValid(t, schema, got.body)
		require.Equal(t, "application/json", got.header.Get("Content-Type"))

		var body webhook.Body
		dec := json.NewDecoder(bytes.NewReader(got.body))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&body))
		stored := loadPost(t, db.DB, post.ID)
		require.Equal(t, post.ID, body.ID)
		require.Equal(t, reservation.StatusPublished, body.Status)
		require.Equal(t, reservation.FormatJSONTime(*stored.PublishedAt), body.PublishedAt)
		require.Equal(t, reservation.FormatJSONTime(stored.ScheduledAt), body.ScheduledAt)
	})
}

// A bad secret is refused by the webhook's Validate, naming the field and
// which secret, never its value; so is a redirect budget out of its limits.
func TestWebhookConfigRefusesBadSecret(t *testing.T) {
	t.Parallel()
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen bytes..."))
	for secret, reason := range map[string]string{
		"hunter2hunter2hunter2hunter2":              "secret 1 of 1 does not begin with whsec_",
		newSecret(t) + " " + short:                  "secret 2 of 2 is a key of 16 bytes",
		"whsec_" + strings.Repeat("%", 40):          "is not whsec_ followed by standard base64",
		newSecret(t) + " " + newSecret(t) + " nope": "secret 3 of 3",
	} {
		err := worker.WebhookConfig{URL: "http://x", Timeout: time.Second, RedirectAttempts: 1, Secret: secret}.Validate()
		var ce *config.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "worker.WebhookConfig.Secret", ce.Field)
		require.Contains(t, err.Error(), reason)
		for _, f := range strings.Fields(secret) {
			require.NotContains(t, err.Error(), strings.TrimPrefix(f, "whsec_"))
		}
	}
	_, err := worker.NewWebhook(worker.WebhookConfig{URL: "http://x", RedirectAttempts: 101})
	require.ErrorContains(t, err, "RedirectAttempts")
}

// A password in the webhook URL (basic auth of the receiver) is sent, but
// never shown: not in a failed attempt's last_error, not in the worker's
// log lines, not in the error of a URL the config refuses.
func TestWebhookURLPasswordIsNeverShown(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw"
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var auth atomic.Value
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, pw, _ := r.BasicAuth()
			auth.Store(pw)
			http.Error(w, "down", http.StatusInternalServerError)
		}))
		t.Cleanup(srv.Close)
		w, logs := webhookWorker(t, db.DB, worker.WebhookConfig{URL: strings.Replace(srv.URL, "://", "://hook:"+password+"@", 1)})

		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
		require.NoError(t, w.Handle(context.Background(), decode(t, reservationRecord(t, post), 0)))
		require.Eventually(t, func() bool { return loadPublication(t, db.DB, post.ID).Attempts >= 2 },
			30*time.Second, 20*time.Millisecond)
		w.Stop()
		require.Equal(t, password, auth.Load(), "the receiver gets the URL's credentials")
		p := loadPublication(t, db.DB, post.ID)
		require.NotNil(t, p.LastError)
		require.Contains(t, *p.LastError, "answered 500")
		require.NotContains(t, *p.LastError, password)
		require.Contains(t, logs.String(), "answered 500")
		require.NotContains(t, logs.String(), password)
	})
	for url, reason := range map[string]string{
		"ftp://hook:" + password + "@example.com/in": "want http or https",
		"http://hook:" + password + "@[::1/in":       "missing ']' in host",
	} {
		err := worker.WebhookConfig{URL: url, Timeout: time.Second, RedirectAttempts: 1}.Validate()
		require.ErrorContains(t, err, reason)
		require.NotContains(t, err.Error(), password)
	}
}

// A retried call keeps its webhook-id (the Idempotency-Key) and is signed
// afresh: its webhook-timestamp is the attempt's own time, and each attempt
// verifies with the Standard Webhooks Go library on the bytes received.
func TestWebhookRetryKeepsIDAndSignsWithAFreshTimestamp(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var mu sync.Mutex
		var calls []call
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{header: r.Header.Clone(), body: body})
			if len(calls) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		// Each attempt's clock is two minutes after the previous one's.
		var attempts atomic.Int64
		now := func() time.Time { return time.Now().Add(time.Duration(attempts.Add(1)-1) * 2 * time.Minute) }
		secret := newSecret(t)
		hook, err := worker.NewWebhook(worker.WebhookConfig{URL: srv.URL, Secret: secret, Now: now})
		require.NoError(t, err)
		w := newWorker(t, db.DB, hook)
		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
		rec := reservationRecord(t, post)
		require.NoError(t, w.Handle(context.Background(), decode(t, rec, 0)))
		awaitPublished(t, db.DB, post)

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, calls, 2)
		verifier, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		for _, c := range calls {
			require.Equal(t, rec.Headers[event.HeaderEventID], c.header.Get(webhook.HeaderID))
			require.Equal(t, c.header.Get("Idempotency-Key"), c.header.Get(webhook.HeaderID))
			require.NoError(t, verifier.Verify(c.body, c.header))
		}
		first, err := strconv.ParseInt(calls[0].header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		second, err := strconv.ParseInt(calls[1].header.Get(webhook.HeaderTimestamp), 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, second-first, int64(120), "the retry's timestamp is its own")
		require.NotEqual(t, calls[0].header.Get(webhook.HeaderSignature), calls[1].header.Get(webhook.HeaderSignature))
	})
}

// webhookWorker is a worker that publishes through a webhook of cfg and
// retries within milliseconds, logging to the returned buffer.
func webhookWorker(t *testing.T, db *gorm.DB, cfg worker.WebhookConfig) (*worker.Worker, *logtest.Buffer) {
	t.Helper()
	hook, err := worker.NewWebhook(cfg)
	require.NoError(t, err)
	logs := &logtest.Buffer{}
	w, err := worker.New(db, worker.Config{Publisher: hook, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w, logs
}

// A redelivered reservation re-arms its timer: the first delivery's commit
// succeeded but its timer was lost (the process stopped before the offset
// was committed), and the redelivery, a duplicate for the inbox, must still
// lead to the publication (worker.go "Also after a duplicate").
func TestWorkerRedeliveredReservationRearmsTimer(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		ctx := context.Background()
		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(2*time.Second))
		rec := reservationRecord(t, post)

		w1 := newWorker(t, db.DB, pub)
		require.NoError(t, w1.Handle(ctx, decode(t, rec, 2)))
		w1.Stop() // the timer goes with the process; the commit stays
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, post.ID).Status)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, post.ID).Status,
			"published before the stop; the redelivery is not tested")

		var outcomes []string
		w2, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			ObserveConsumed: func(_, o string) { outcomes = append(outcomes, o) }})
		require.NoError(t, err)
		t.Cleanup(w2.Stop)
		require.NoError(t, w2.Handle(ctx, decode(t, rec, 2))) // no assignment: only the redelivery can arm it
		require.Equal(t, []string{worker.OutcomeDuplicate}, outcomes)
		require.Equal(t, 1, w2.Pending(), "the redelivery armed no timer")
		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			10*time.Second, 10*time.Millisecond, "the redelivered reservation was never published")
		require.Equal(t, 1, pub.count(post.ID))
	})
}

// The webhook makes one request per call: 2xx is success; 408, 429 and
// 5xx are passing failures (a Retry-After on 429 or 503 is passed on as
// RetryLaterError, in seconds or as an HTTP date, capped at an hour); any
// other answer is a refusal.
func TestWebhookAnswers(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		code     int
		after    string
		requests int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		if after != "" {
			rw.Header().Set("Retry-After", after)
		}
		rw.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	hook, err := worker.NewWebhook(worker.WebhookConfig{URL: srv.URL})
	require.NoError(t, err)
	publish := func(c int, ra string) error {
		mu.Lock()
		code, after, requests = c, ra, 0
		mu.Unlock()
		at := time.Now()
		err := hook.Publish(context.Background(), worker.Publishing{
			Post: reservation.Post{ID: 1, Status: reservation.StatusPublished, PublishedAt: &at}, Key: "k"})
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, requests, "one request per call, whatever the answer")
		return err
	}
	for _, c := range []int{200, 201, 204} {
		require.NoError(t, publish(c, ""), "%d", c)
	}
	for _, c := range []int{408, 429, 500, 502, 503, 504} {
		err := publish(c, "")
		require.Error(t, err, "%d", c)
		require.NotErrorIs(t, err, worker.ErrRefused, "%d is retried", c)
		require.ErrorContains(t, err, strconv.Itoa(c))
	}
	for _, c := range []int{400, 401, 403, 404, 409, 410, 422} {
		require.ErrorIs(t, publish(c, ""), worker.ErrRefused, "%d refuses", c)
	}

	var rl *worker.RetryLaterError
	require.ErrorAs(t, publish(429, "7"), &rl)
	require.Equal(t, 7*time.Second, rl.After)
	require.ErrorAs(t, publish(503, time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat)), &rl)
	require.InDelta(t, 90*time.Second, rl.After, float64(5*time.Second))
	require.ErrorAs(t, publish(429, "86400"), &rl)
	require.Equal(t, time.Hour, rl.After, "capped")
	require.False(t, errors.As(publish(429, "soon"), &rl), "an unreadable Retry-After is ignored")
	require.False(t, errors.As(publish(500, "7"), &rl), "only 429 and 503 carry Retry-After")
}

// Through the worker: a receiver answering 408, then 429 with Retry-After,
// then 200 gets the post published, the next request waiting as long as
// the 429 asked (the worker's own pause is far shorter here). A 404 is a
// refusal: FAILED at the first answer, and the error log line names the
// reason. Each publication's outcome is reported once.
func TestWorkerWebhookRetriesAndRefusals(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		retried := reservationtest.InsertWorking(t, db.DB, time.Now())
		refused := reservationtest.InsertWorking(t, db.DB, time.Now())
		cancelled := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		var (
			mu       sync.Mutex
			answers  = []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusOK}
			times    []time.Time
			refusedN int
		)
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if r.Header.Get("Idempotency-Key") == "" {
				rw.WriteHeader(http.StatusBadRequest)
				return
			}
			var body struct {
				ID int64 `json:"id"`
			}
			if err := decodeBody(r, &body); err != nil || body.ID != retried.ID {
				refusedN++
				http.Error(rw, "no such channel", http.StatusNotFound)
				return
			}
			times = append(times, time.Now())
			code := answers[0]
			answers = answers[1:]
			if code == http.StatusTooManyRequests {
				rw.Header().Set("Retry-After", "1")
			}
			rw.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		hook, err := worker.NewWebhook(worker.WebhookConfig{URL: srv.URL})
		require.NoError(t, err)
		logs := &logtest.Buffer{}
		var outcomes tally
		w, err := worker.New(db.DB, worker.Config{Publisher: hook, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond,
			ObserveSettled: outcomes.add})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, retried), 0)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, refused), 0)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, cancelled), 0)))
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		_, err = svc.Cancel(ctx, cancelled.ID)
		require.NoError(t, err)
		cancel := written(t, db.DB, cancelRecord(t, cancelled)) // as the relay sends it: a row of the outbox
		require.NoError(t, w.Handle(ctx, decode(t, cancel, 0)))
		require.NoError(t, w.Handle(ctx, decode(t, cancel, 0))) // a redelivery counts nothing

		require.Eventually(t, func() bool { return loadPost(t, db.DB, retried.ID).Status == reservation.StatusPublished },
			20*time.Second, 10*time.Millisecond, "408 and 429 were not retried")
		mu.Lock()
		require.Len(t, times, 3, "408, 429, 200")
		require.GreaterOrEqual(t, times[2].Sub(times[1]), time.Second, "the 429's Retry-After was not honoured")
		mu.Unlock()
		require.Equal(t, 3, loadPublication(t, db.DB, retried.ID).Attempts)

		require.Eventually(t, func() bool { return loadPublication(t, db.DB, refused.ID).Status == worker.PublicationFailed },
			10*time.Second, 10*time.Millisecond)
		p := loadPublication(t, db.DB, refused.ID)
		require.Contains(t, *p.LastError, "404")
		require.Equal(t, 1, p.Attempts)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, refused.ID).Status)
		mu.Lock()
		require.Equal(t, 1, refusedN, "a refusal is not retried")
		mu.Unlock()
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
		var line string
		for _, l := range bytes.Split([]byte(logs.String()), []byte("\n")) {
			if bytes.Contains(l, []byte("refused for good")) {
				line = string(l)
			}
		}
		require.NotEmpty(t, line, "no log line for the refusal:\n%s", logs.String())
		require.Contains(t, line, "post_id="+strconv.FormatInt(refused.ID, 10))
		require.Contains(t, line, "last_error=")
		require.Contains(t, line, "answered 404: no such channel")

		require.Equal(t, map[string]int{worker.OutcomePublished: 1, worker.OutcomeFailed: 1, worker.OutcomeCancelled: 1}, outcomes.counts())
	})
}

func decodeBody(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }
