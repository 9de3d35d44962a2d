package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// starvation runs 12 posts whose receiver answers 503 (and, with hang,
// every other one hangs until the request times out) and one healthy post
// due 100 ms after them, through a webhook and a worker of cfg, and
// returns how long after its scheduledAt the receiver got the healthy
// post.
func starvation(t *testing.T, db *database.DB, cfg worker.Config, hang bool) time.Duration {
	t.Helper()
	now := time.Now()
	var failing []*reservation.Post
	for range 12 {
		failing = append(failing, insertWorking(t, db.DB, now))
	}
	good := insertWorking(t, db.DB, now.Add(100*time.Millisecond))

	var (
		mu       sync.Mutex
		received time.Time // when the healthy post's request came
		failures int
	)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			ID int64 `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		if body.ID == good.ID {
			mu.Lock()
			received = time.Now()
			mu.Unlock()
			return
		}
		mu.Lock()
		failures++
		mu.Unlock()
		if hang && body.ID%2 == 0 {
			select { // until the worker's request times out or the test ends
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		rw.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	hook, err := worker.NewWebhook(worker.WebhookConfig{URL: srv.URL})
	require.NoError(t, err)
	cfg.Publisher, cfg.Logger = hook, quiet()
	w, err := worker.New(db.DB, cfg)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	ctx := context.Background()
	for _, p := range failing {
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
	}
	require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, good), 0)))

	require.Eventually(t, func() bool { return loadPost(t, db.DB, good.ID).Status == reservation.StatusPublished },
		30*time.Second, 10*time.Millisecond, "the healthy post was not published within 30 s")
	mu.Lock()
	got := received
	mu.Unlock()
	require.False(t, got.IsZero(), "published without its request")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return failures >= 12 },
		30*time.Second, 10*time.Millisecond, "the failing posts were never tried")
	for _, p := range failing {
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, p.ID).Status)
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, p.ID).Status)
	}
	lag := got.Sub(good.ScheduledAt)
	t.Logf("healthy post received %s after its time", lag)
	return lag
}

// With the default concurrency, 12 posts whose receiver fails (503) or
// hangs do not hold back a healthy post due 100 ms later: it is published
// within 1 s of its time.
func TestWorkerFailingWebhookPostsDoNotStarveHealthyOnes(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		lag := starvation(t, db, worker.Config{}, true)
		require.Less(t, lag, time.Second, "the healthy post waited behind failing ones")
	})
}

// The slots are what is saved, not only their number: with 2 slots, 12
// posts that keep failing still leave room, since a publication holds a
// slot during one request and none while it waits to try again.
func TestWorkerBackoffHoldsNoSlot(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		lag := starvation(t, db, worker.Config{Concurrency: 2}, false)
		require.Less(t, lag, time.Second, "the healthy post waited behind failing ones")
	})
}

// The default concurrency is no longer the 4 slots that a spike queued
// behind.
func TestWorkerDefaultConcurrency(t *testing.T) {
	t.Parallel()
	w, err := worker.New(nil, worker.Config{})
	require.NoError(t, err)
	require.Equal(t, worker.DefaultConcurrency, w.Config().Concurrency)
	require.GreaterOrEqual(t, w.Config().Concurrency, 32)
}
