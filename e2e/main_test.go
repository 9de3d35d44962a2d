package e2e_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// TestMain bounds the database pool of every process the tests start
// (postingtest.BoundPool).
func TestMain(m *testing.M) { postingtest.Main(m) }

// run starts one command of the binary as its own process until the test
// ends, its output into out; when the test ends it gets SIGTERM and must
// exit 0.
func run(t *testing.T, out io.Writer, args ...string) {
	t.Helper()
	p := postingtest.Start(t, out, nil, args...)
	t.Cleanup(func() { p.Terminate(t) })
}

// countingWebhook is a webhook receiver that counts its calls per post;
// calls returns a copy of the counts. A post called again must be called
// with the Idempotency-Key of its first call, or the test fails.
func countingWebhook(t *testing.T) (srv *httptest.Server, calls func() map[int64]int) {
	t.Helper()
	var (
		mu   sync.Mutex
		hook = map[int64]int{}    // webhook calls per post
		keys = map[int64]string{} // the Idempotency-Key of each post's first call
	)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p api.PostJSON
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || r.Header.Get("Idempotency-Key") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		hook[p.ID]++
		if first, ok := keys[p.ID]; ok && first != key {
			t.Errorf("post %d called with Idempotency-Key %q, then %q", p.ID, first, key)
		}
		keys[p.ID] = key
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[int64]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(hook)
	}
}

// requireOneCallPerPost checks that the webhook heard of posts posts, each
// once.
func requireOneCallPerPost(t *testing.T, calls map[int64]int, posts int) {
	t.Helper()
	require.Len(t, calls, posts)
	for id, n := range calls {
		require.Equal(t, 1, n, "webhook calls for post %d", id)
	}
}

// waitPublished opens the database of dbURL and waits up to within for
// posts posts to be PUBLISHED; it returns the database, closed when the
// test ends.
func waitPublished(t *testing.T, dbURL string, posts int64, within time.Duration) *database.DB {
	t.Helper()
	db, err := database.Open(dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).Where("status = ?", reservation.StatusPublished).Count(&n).Error)
		return n == posts
	}, within, 200*time.Millisecond, "not every post was published")
	return db
}

// requirePublishedOnce waits up to within for posts posts of the database of
// dbURL to be PUBLISHED, then checks that each has its one publication and
// that the webhook heard of each once. It returns the database.
func requirePublishedOnce(t *testing.T, dbURL string, posts int, within time.Duration, calls func() map[int64]int) *database.DB {
	t.Helper()
	db := waitPublished(t, dbURL, int64(posts), within)
	var pubs []worker.Publication
	require.NoError(t, db.DB.Find(&pubs).Error)
	require.Len(t, pubs, posts)
	requireOneCallPerPost(t, calls(), posts)
	return db
}
