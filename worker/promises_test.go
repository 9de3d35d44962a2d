package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// A redelivered reservation re-arms its timer: the first delivery's commit
// succeeded but its timer was lost (the process stopped before the offset
// was committed), and the redelivery, a duplicate for the inbox, must still
// lead to the publication (worker.go "Also after a duplicate").
func TestWorkerRedeliveredReservationRearmsTimer(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		ctx := context.Background()
		post := insertWorking(t, db.DB, time.Now().Add(2*time.Second))
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
		retried := insertWorking(t, db.DB, time.Now())
		refused := insertWorking(t, db.DB, time.Now())
		cancelled := insertWorking(t, db.DB, time.Now().Add(time.Hour))
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
		var outcomesMu sync.Mutex
		outcomes := map[string]int{}
		w, err := worker.New(db.DB, worker.Config{Publisher: hook, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond,
			ObserveSettled: func(o string) { outcomesMu.Lock(); outcomes[o]++; outcomesMu.Unlock() }})
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
		require.NoError(t, w.Handle(ctx, decode(t, cancelRecord(t, cancelled), 0)))
		require.NoError(t, w.Handle(ctx, decode(t, cancelRecord(t, cancelled), 0))) // a redelivery counts nothing

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

		outcomesMu.Lock()
		defer outcomesMu.Unlock()
		require.Equal(t, map[string]int{worker.OutcomePublished: 1, worker.OutcomeFailed: 1, worker.OutcomeCancelled: 1}, outcomes)
	})
}

func decodeBody(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }
