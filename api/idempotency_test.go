package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
)

// createWithKey sends newPostBody-like body to POST /api/v1/posts with
// Idempotency-Key key, as token's subject (none when token is "").
func (e *apiEnv) createWithKey(t *testing.T, token, key, body string) (*http.Response, []byte) {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, api.IdempotencyKeyHeader: {key}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return e.doHeaders(t, http.MethodPost, "/api/v1/posts", body, h)
}

// requireCreated checks a 201 of a create and whether it was a replay, and
// returns the post's id.
func requireCreated(t *testing.T, resp *http.Response, body []byte, replayed bool) string {
	t.Helper()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	want := ""
	if replayed {
		want = "true"
	}
	require.Equal(t, want, resp.Header.Get(api.IdempotentReplayedHeader))
	id := idOf(t, decodeObject(t, body))
	require.Equal(t, "/api/v1/posts/"+id, resp.Header.Get("Location"))
	return id
}

// The same key and the same request answer the first answer again: 201,
// the same post byte for byte, Idempotent-Replayed: true, and no new post or
// event, also when the body spells the same request differently. Another
// key, or the same key of another owner, is another post.
func TestCreateWithIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		e := apiSetup(t, db, func(c *api.Config) { c.Auth = verifier(t, testSecret, "") })
		alice, bob := tokenFor(t, "alice"), tokenFor(t, "bob")

		resp, first := e.createWithKey(t, alice, "order-1", newPostBody)
		id := requireCreated(t, resp, first, false)
		// Edit the post: the replay is the first answer, not the post now.
		resp, body := e.doAs(t, alice, http.MethodPatch, "/api/v1/posts/"+id, `{"title":"edited"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

		same := `{"scheduledAt":"2030-01-03T01:00:00+01:00", "content":"c","title":"t"}`
		resp, again := e.createWithKey(t, alice, "order-1", same)
		require.Equal(t, id, requireCreated(t, resp, again, true))
		require.JSONEq(t, string(first), string(again))
		posts, rows := counts(t, db.DB)
		require.Equal(t, [2]int64{1, 2}, [2]int64{posts, rows}, "one post; its CREATED and UPDATED events only")
		require.Equal(t, []string{"CREATED RESERVED", "UPDATED RESERVED"}, actions(t, db.DB, id))

		// Keys are case-sensitive, and each owner has keys of its own.
		resp, body = e.createWithKey(t, alice, "ORDER-1", newPostBody)
		other := requireCreated(t, resp, body, false)
		resp, body = e.createWithKey(t, bob, "order-1", newPostBody)
		bobs := requireCreated(t, resp, body, false)
		require.NotEqual(t, id, other)
		require.NotEqual(t, id, bobs)
		require.Equal(t, "bob", loadPost(t, db.DB, bobs).OwnerID)
		posts, _ = counts(t, db.DB)
		require.EqualValues(t, 3, posts)
	})
}

// The same key with another request is 422 problem+json, and writes
// nothing; the key still replays its own request afterwards.
func TestCreateWithIdempotencyKeyAndAnotherBodyIsRefused(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		resp, first := e.createWithKey(t, "", "k", newPostBody)
		requireCreated(t, resp, first, false)
		for _, body := range []string{
			`{"title":"other","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`,
			`{"title":"t","content":"other","scheduledAt":"2030-01-03T00:00:00Z"}`,
			`{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:01Z"}`,
		} {
			resp, got := e.createWithKey(t, "", "k", body)
			p := requireProblem(t, resp, got, http.StatusUnprocessableEntity)
			require.Equal(t, "Idempotency-Key", p.Field)
			require.Contains(t, p.Detail, "another request body")
			require.Empty(t, resp.Header.Get(api.IdempotentReplayedHeader))
		}
		posts, rows := counts(t, e.db.DB)
		require.Equal(t, [2]int64{1, 1}, [2]int64{posts, rows})
		resp, again := e.createWithKey(t, "", "k", newPostBody)
		requireCreated(t, resp, again, true)
		require.JSONEq(t, string(first), string(again))
	})
}

// Eight requests with one key at once create one post and one event: one
// answer is the creation, the others wait for its transaction and replay it.
// They go to two API instances on the one database, as to two serve
// processes behind a load balancer: nothing but the database coordinates them.
func TestCreateWithIdempotencyKeyConcurrentlyCreatesOnePost(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		apis := []*apiEnv{e, apiSetup(t, e.db, nil)}
		const n = 8
		var wg sync.WaitGroup
		var created, replayed atomic.Int32
		ids := make([]string, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resp, body := apis[i%len(apis)].createWithKey(t, "", "same-key", newPostBody)
				require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
				if resp.Header.Get(api.IdempotentReplayedHeader) == "true" {
					replayed.Add(1)
				} else {
					created.Add(1)
				}
				ids[i] = idOf(t, decodeObject(t, body))
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, created.Load())
		require.EqualValues(t, n-1, replayed.Load())
		for _, id := range ids {
			require.Equal(t, ids[0], id)
		}
		posts, rows := counts(t, e.db.DB)
		require.Equal(t, [2]int64{1, 1}, [2]int64{posts, rows})
		require.Equal(t, []string{"CREATED RESERVED"}, actions(t, e.db.DB, ids[0]))
	})
}

// A key is honoured for the retention: the cleaner's step deletes keys
// older than it (and only those), and a key past it creates a new post,
// purged or not yet.
func TestIdempotencyKeysExpireAfterTheRetention(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		// The service's clock, moved by the test; the cleaner reads the
		// database's clock, so keys are written relative to it.
		dbNow := databasetest.Now(t, db.DB)
		var now atomic.Pointer[time.Time]
		setNow := func(t time.Time) { now.Store(&t) }
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{
			Now: func() time.Time { return *now.Load() }, IdempotencyRetention: 24 * time.Hour})
		require.NoError(t, err)
		e := apiSetup(t, db, func(c *api.Config) { c.Posts = svc })
		body := func(at time.Time) string {
			return `{"title":"t","content":"c","scheduledAt":"` + at.Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
		}
		create := func(key string, at time.Time, replayed bool) string {
			setNow(at)
			resp, got := e.createWithKey(t, "", key, body(at))
			return requireCreated(t, resp, got, replayed)
		}
		old := dbNow.Add(-25 * time.Hour)
		young := dbNow.Add(-23 * time.Hour)
		oldID := create("old", old, false)
		youngID := create("young", young, false)

		cleaner, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{},
			outbox.PurgeStep{Name: "idempotency_keys", Purge: reservation.PurgeIdempotencyKeys, Retention: 24 * time.Hour})
		require.NoError(t, err)
		res, err := cleaner.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Deleted["idempotency_keys"])

		// Replayed with its own body, whose scheduledAt has passed meanwhile.
		setNow(dbNow)
		resp, got := e.createWithKey(t, "", "young", body(young))
		require.Equal(t, youngID, requireCreated(t, resp, got, true))
		// Another body (the old one's time has passed): a kept key would
		// answer 422.
		resp, got = e.createWithKey(t, "", "old", body(dbNow))
		require.NotEqual(t, oldID, requireCreated(t, resp, got, false), "a purged key creates a new post")

		// Not purged yet, but older than the retention by the service's clock.
		lateID := create("young", dbNow.Add(2*time.Hour), false)
		require.NotEqual(t, youngID, lateID)
		posts, rows := counts(t, db.DB)
		require.Equal(t, [2]int64{4, 4}, [2]int64{posts, rows})
		var keys int64
		require.NoError(t, db.Table("idempotency_keys").Count(&keys).Error)
		require.EqualValues(t, 2, keys, "old (new post) and young (new post); the expired rows are gone")
	})
}

// A key that is empty, longer than 255 characters or not printable ASCII,
// or a second Idempotency-Key header, is a 400 naming the header, and
// writes nothing; 255 printable characters are a key.
func TestCreateRefusesABadIdempotencyKey(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		for name, values := range map[string][]string{
			"empty":          {""},
			"blank":          {"   "},
			"256 characters": {strings.Repeat("k", 256)},
			"tab":            {"a\tb"},
			"non-ASCII":      {"clé"},
			"two headers":    {"a", "b"},
		} {
			h := http.Header{"Content-Type": {"application/json"}, api.IdempotencyKeyHeader: values}
			resp, body := e.doHeaders(t, http.MethodPost, "/api/v1/posts", newPostBody, h)
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, "Idempotency-Key", p.Field, name)
		}
		posts, rows := counts(t, e.db.DB)
		require.Equal(t, [2]int64{0, 0}, [2]int64{posts, rows})
		var keys int64
		require.NoError(t, e.db.Table("idempotency_keys").Count(&keys).Error)
		require.Zero(t, keys)

		longest := strings.Repeat("~", 255)
		resp, first := e.createWithKey(t, "", longest, newPostBody)
		requireCreated(t, resp, first, false)
		resp, again := e.createWithKey(t, "", longest, newPostBody)
		requireCreated(t, resp, again, true)
	})
}
