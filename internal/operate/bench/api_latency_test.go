package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/bench"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// One client's creates are each timed once, and each is a post written with
// its event; the first, on a fresh connection, is written but not timed.
func TestAPICreateLatencyTimesEveryCreateOfOneClient(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		posts, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		h, err := api.NewHandler(api.Config{Posts: posts})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		defer srv.Close()

		lat, err := bench.APICreateLatency(context.Background(), 300*time.Millisecond, srv.URL)
		require.NoError(t, err)
		require.Len(t, lat, 1)
		got := lat[0]
		require.Positive(t, got.Events)
		var written, events int64
		require.NoError(t, db.Table("posts").Count(&written).Error)
		require.NoError(t, db.Table("outbox").Where("event_type = ?", "POSTING_EVENT").Count(&events).Error)
		require.EqualValues(t, got.Events+1, written, "one post a timed create, and the untimed first")
		require.EqualValues(t, written, events, "one event a post")
		require.Positive(t, got.P50)
		require.LessOrEqual(t, got.P50, got.P99)
		require.LessOrEqual(t, got.P99, got.Max)
	})
}

// A create's time runs until its answer is read: a service that takes
// 30 ms an answer is timed at no less.
func TestAPICreateLatencyWaitsForEachAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		w.Header().Set("Location", "/api/v1/posts/1")
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	lat, err := bench.APICreateLatency(context.Background(), 200*time.Millisecond, srv.URL)
	require.NoError(t, err)
	require.Positive(t, lat[0].Events)
	require.GreaterOrEqual(t, lat[0].P50, 30*time.Millisecond)
}

// A load in which no create was timed is an error, not a distribution of
// nothing; a cancel while a create waits for its answer ends the load with
// the cancel, not with the connection's timeout.
func TestAPICreateLatencyGivesNoFigureWithoutCreates(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/api/v1/posts/1")
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	_, err := bench.APICreateLatency(context.Background(), 0, srv.URL)
	require.ErrorContains(t, err, "no create was timed")

	release := make(chan struct{})
	var calls atomic.Int32
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 {
			<-release
		}
		w.Header().Set("Location", "/api/v1/posts/1")
		w.WriteHeader(http.StatusCreated)
	}))
	defer stalled.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for calls.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err = bench.APICreateLatency(ctx, time.Minute, stalled.URL)
	require.ErrorIs(t, err, context.Canceled)
	require.NotContains(t, err.Error(), "timeout")
}

// An answer other than 201 stops the load with the answer in the error,
// as does a base URL the client cannot speak to.
func TestAPICreateLatencyStopsAtARefusal(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"title":"scheduledAt: must lie in the future"}`)
	}))
	defer srv.Close()

	_, err := bench.APICreateLatency(context.Background(), time.Second, srv.URL)
	require.ErrorContains(t, err, "answered 422")
	require.ErrorContains(t, err, "must lie in the future")
	require.EqualValues(t, 1, calls.Load(), "no create after the refusal")

	_, err = bench.APICreateLatency(context.Background(), time.Second, "https://"+srv.Listener.Addr().String())
	require.ErrorContains(t, err, "want http://host:port")
	_, err = bench.APICreateLatency(context.Background(), time.Second)
	require.ErrorContains(t, err, "no service")
}

// With two services the client takes turns: each is sent every other
// create, and each service's distribution holds its own creates.
func TestAPICreateLatencyTakesTurnsBetweenServices(t *testing.T) {
	var order []string
	var mu sync.Mutex
	service := func(name string, delay time.Duration) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			time.Sleep(delay)
			w.Header().Set("Location", "/api/v1/posts/1")
			w.WriteHeader(http.StatusCreated)
		}))
	}
	slow, fast := service("slow", 20*time.Millisecond), service("fast", 0)
	defer slow.Close()
	defer fast.Close()

	lat, err := bench.APICreateLatency(context.Background(), 200*time.Millisecond, slow.URL, fast.URL)
	require.NoError(t, err)
	require.Len(t, lat, 2)
	require.Equal(t, lat[0].Events, lat[1].Events, "one create each a turn")
	require.Len(t, order, lat[0].Events+lat[1].Events+2, "and one untimed first create each")
	for i, name := range order {
		require.Equal(t, []string{"slow", "fast"}[i%2], name, "request %d", i)
	}
	require.GreaterOrEqual(t, lat[0].P50, 20*time.Millisecond, "the slow service's creates")
}
