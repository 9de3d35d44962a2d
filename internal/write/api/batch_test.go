package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

const batchPath = "/api/v1/posts/batch"

// batchProblem is a problem with the errors list of a batch's 400.
type batchProblem struct {
	response.Problem
	Errors []response.FieldError `json:"errors"`
}

// requireBatchProblem checks a problem+json answer of status, with or
// without an errors list, and returns it.
func requireBatchProblem(t *testing.T, resp *http.Response, body []byte, status int) batchProblem {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, string(body))
	require.Equal(t, response.ProblemContentType, resp.Header.Get("Content-Type"), string(body))
	var p batchProblem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&p), string(body))
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Detail)
	return p
}

// pointers are the places a batch problem names, in its order.
func (p batchProblem) pointers() []string {
	out := make([]string, len(p.Errors))
	for i, e := range p.Errors {
		out[i] = e.Pointer
	}
	return out
}

// batchItem is the JSON of one post of a batch, titled after its place.
func batchItem(i int) string {
	return `{"title":"post ` + strconv.Itoa(i) + `","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`
}

// batchBody is a batch of items; replace, if set, gives item i's JSON
// instead of batchItem(i) when it returns a non-empty string.
func batchBody(n int, replace func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = batchItem(i)
		if replace != nil {
			if s := replace(i); s != "" {
				items[i] = s
			}
		}
	}
	return `{"posts":[` + strings.Join(items, ",") + `]}`
}

// sendBatch posts body to the batch route as token's subject ("" for
// none) with the Idempotency-Key key ("" for none).
func (e *apiEnv) sendBatch(t *testing.T, token, key, body string) (*http.Response, []byte) {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		h.Set(api.IdempotencyKeyHeader, key)
	}
	return e.doHeaders(t, http.MethodPost, batchPath, body, h)
}

// requireBatchCreated checks a 201 of a batch of n posts, whether it was a
// replay, and returns its posts.
func requireBatchCreated(t *testing.T, resp *http.Response, body []byte, n int, replayed bool) []map[string]any {
	t.Helper()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	want := ""
	if replayed {
		want = "true"
	}
	require.Equal(t, want, resp.Header.Get(api.IdempotentReplayedHeader))
	var out struct {
		Posts []map[string]any `json:"posts"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&out))
	require.Len(t, out.Posts, n)
	return out.Posts
}

// A batch of 1,000 posts commits 1,000 posts and their 1,000 CREATED
// events, and answers the posts in the order of the request, shaped as a
// single create answers a post. A batch with one bad post (the fourth)
// writes nothing and names that post's field.
func TestBatchCreateWritesAllOrNothing(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		resp, body := e.sendBatch(t, "", "", batchBody(api.MaxBatchPosts, nil))
		posts := requireBatchCreated(t, resp, body, api.MaxBatchPosts, false)
		ids := map[string]bool{}
		for i, p := range posts {
			requirePostShape(t, p)
			require.Equal(t, "post "+strconv.Itoa(i), p["title"], "request order")
			require.Equal(t, "RESERVED", p["status"])
			require.Equal(t, "2030-01-03T00:00:00Z", p["scheduledAt"])
			ids[idOf(t, p)] = true
		}
		require.Len(t, ids, api.MaxBatchPosts, "every post has an id of its own")

		// Each answered post is stored as answered, with one CREATED event.
		var stored []reservation.Post
		require.NoError(t, e.db.Order("id").Find(&stored).Error)
		require.Len(t, stored, api.MaxBatchPosts)
		byID := map[string]reservation.Post{}
		for _, p := range stored {
			byID[strconv.FormatInt(p.ID, 10)] = p
		}
		for i, p := range posts {
			s, ok := byID[idOf(t, p)]
			require.True(t, ok, "post %d of the answer is stored", i)
			require.Equal(t, p["title"], s.Title)
		}
		var msgs []outbox.Message
		require.NoError(t, e.db.Order("id").Find(&msgs).Error)
		require.Len(t, msgs, api.MaxBatchPosts)
		events := map[string]int{}
		for _, m := range msgs {
			require.Equal(t, string(event.PostingEvent), m.EventType)
			require.Equal(t, outbox.StatusPending, m.Status)
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(m.Payload), &v))
			require.Equal(t, "CREATED", v["action"])
			require.EqualValues(t, m.AggregateID, v["postId"])
			events[strconv.FormatInt(m.AggregateID, 10)]++
		}
		for id := range ids {
			require.Equal(t, 1, events[id], "post %s has one CREATED event", id)
		}

		check := writesNothing(t, e.db.DB)
		resp, body = e.sendBatch(t, "", "", batchBody(api.MaxBatchPosts, func(i int) string {
			if i == 3 {
				return `{"title":"t","content":"c","scheduledAt":"2020-01-01T00:00:00Z"}`
			}
			return ""
		}))
		p := requireBatchProblem(t, resp, body, http.StatusBadRequest)
		require.Equal(t, []string{"/posts/3/scheduledAt"}, p.pointers())
		require.Equal(t, "must lie in the future", p.Errors[0].Detail)
		require.Equal(t, "posts", p.Field)
		require.Contains(t, p.Detail, "/posts/3/scheduledAt")
		check()
	})
}

// Every bad post of a batch is named, each field that is wrong in it, in
// the order of the posts: fields that cannot be read (not a string, not a
// date-time, missing), fields the rules refuse (blank, too long, in the
// past, publishBy before scheduledAt), and posts that are not objects or
// carry an unknown field. Nothing is written.
func TestBatchCreateNamesEveryInvalidPost(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		check := writesNothing(t, e.db.DB)
		bad := map[int]string{
			1: `{"title":1,"content":" ","scheduledAt":"2030-01-03T00:00:00Z"}`,
			3: `{"title":"t","content":"c","scheduledAt":"tomorrow"}`,
			4: `{"title":"` + strings.Repeat("x", reservation.MaxTitleLength+1) + `","content":"c","scheduledAt":"2020-01-01T00:00:00Z"}`,
			5: `"not a post"`,
			6: `{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:00Z","owner":"x"}`,
			7: `{"content":"c"}`,
			8: `{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:00Z","publishBy":"2030-01-02T12:00:00Z"}`,
		}
		resp, body := e.sendBatch(t, "", "", batchBody(10, func(i int) string { return bad[i] }))
		p := requireBatchProblem(t, resp, body, http.StatusBadRequest)
		require.Equal(t, []string{
			"/posts/1/title", "/posts/1/content",
			"/posts/3/scheduledAt",
			"/posts/4/title", "/posts/4/scheduledAt",
			"/posts/5",
			"/posts/6/owner",
			"/posts/7/title", "/posts/7/scheduledAt",
			"/posts/8/publishBy",
		}, p.pointers(), string(body))
		for _, e := range p.Errors {
			require.NotEmpty(t, e.Detail, e.Pointer)
			require.NotContains(t, e.Detail, "posts/", "the pointer says where; the detail says what")
		}
		require.Contains(t, p.Detail, "10 fields")
		check()
	})
}

// A dry run checks a batch as a create does and writes nothing: 200 with
// the posts it would create (no ids yet), or the same 400 a create gets.
func TestBatchDryRunWritesNothing(t *testing.T) {
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
		alice := tokenFor(t, "alice")
		check := writesNothing(t, e.db.DB)
		resp, body := e.sendBatch(t, alice, "", `{"dryRun":true,"posts":[`+batchItem(0)+`,`+
			`{"title":"b","content":"c","scheduledAt":"2030-01-03T01:00:00+01:00","publishBy":"2030-01-04T00:00:00Z"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.JSONEq(t, `{"dryRun":true,"posts":[
			{"title":"post 0","content":"c","status":"RESERVED","scheduledAt":"2030-01-03T00:00:00Z","publishBy":null,"ownerId":"alice"},
			{"title":"b","content":"c","status":"RESERVED","scheduledAt":"2030-01-03T00:00:00Z","publishBy":"2030-01-04T00:00:00Z","ownerId":"alice"}]}`,
			string(body))

		resp, body = e.sendBatch(t, alice, "", `{"dryRun":true,"posts":[`+batchItem(0)+`,{"title":"","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}]}`)
		p := requireBatchProblem(t, resp, body, http.StatusBadRequest)
		require.Equal(t, []string{"/posts/1/title"}, p.pointers())
		check()

		// dryRun false is a create.
		resp, body = e.sendBatch(t, alice, "", `{"dryRun":false,"posts":[`+batchItem(0)+`]}`)
		requireBatchCreated(t, resp, body, 1, false)
	})
}

// The Idempotency-Key covers the whole batch: the same key and the same
// posts answer the first answer again and write nothing, also after a post
// was edited; other posts under the key, or a single create with it, are
// 422 and write nothing.
func TestBatchCreateWithIdempotencyKeyReplaysTheBatch(t *testing.T) {
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
		alice, bob := tokenFor(t, "alice"), tokenFor(t, "bob")
		body := batchBody(3, nil)
		resp, first := e.sendBatch(t, alice, "batch-1", body)
		posts := requireBatchCreated(t, resp, first, 3, false)
		for _, p := range posts {
			require.Equal(t, "alice", p["ownerId"], "the token's owner owns every post")
		}
		id := idOf(t, posts[1])
		resp, got := e.doAs(t, alice, http.MethodPatch, "/api/v1/posts/"+id, `{"title":"edited"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
		check := writesNothing(t, e.db.DB)

		// The same posts, spelled differently.
		same := strings.ReplaceAll(body, `"2030-01-03T00:00:00Z"`, `"2030-01-03T01:00:00+01:00"`)
		resp, again := e.sendBatch(t, alice, "batch-1", same)
		requireBatchCreated(t, resp, again, 3, true)
		require.JSONEq(t, string(first), string(again))

		for name, other := range map[string]string{
			"another title":     strings.Replace(body, `"post 2"`, `"other"`, 1),
			"another order":     `{"posts":[` + batchItem(1) + `,` + batchItem(0) + `,` + batchItem(2) + `]}`,
			"one post fewer":    batchBody(2, nil),
			"a publishBy added": strings.Replace(body, `"post 2"`, `"post 2","publishBy":"2030-01-05T00:00:00Z"`, 1),
		} {
			resp, got := e.sendBatch(t, alice, "batch-1", other)
			p := requireProblem(t, resp, got, http.StatusUnprocessableEntity)
			require.Equal(t, api.IdempotencyKeyHeader, p.Field, name)
		}
		resp, got = e.createWithKey(t, alice, "batch-1", newPostBody)
		requireProblem(t, resp, got, http.StatusUnprocessableEntity)
		check()

		// A key of a single create refuses a batch; another owner's key is
		// its own.
		resp, got = e.createWithKey(t, alice, "single-1", newPostBody)
		requireCreated(t, resp, got, false)
		resp, got = e.sendBatch(t, alice, "single-1", body)
		requireProblem(t, resp, got, http.StatusUnprocessableEntity)
		resp, got = e.sendBatch(t, bob, "batch-1", body)
		for _, p := range requireBatchCreated(t, resp, got, 3, false) {
			require.Equal(t, "bob", p["ownerId"])
		}
	})
}

// An empty batch, one over the limit, one without posts, and other bodies
// refused as a whole are 400 naming the member at fault, and write
// nothing; a body over MaxBatchBodyBytes is 413.
func TestBatchCreateRefusesBadBatches(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), nil)
	check := writesNothing(t, e.db.DB)
	for name, c := range map[string]struct {
		body, pointer string
	}{
		"empty list":         {`{"posts":[]}`, "/posts"},
		"1,001 posts":        {batchBody(api.MaxBatchPosts+1, nil), "/posts"},
		"no posts":           {`{}`, "/posts"},
		"posts not an array": {`{"posts":{}}`, "/posts"},
		"posts null":         {`{"posts":null}`, "/posts"},
		"dryRun a string":    {`{"posts":[` + batchItem(0) + `],"dryRun":"yes"}`, "/dryRun"},
		"unknown member":     {`{"posts":[` + batchItem(0) + `],"force":true}`, "/force"},
		"name twice in a post": {`{"posts":[` + batchItem(0) + `,{"title":"a","title":"b","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}]}`,
			"/posts/1/title"},
	} {
		resp, body := e.sendBatch(t, "", "", c.body)
		p := requireBatchProblem(t, resp, body, http.StatusBadRequest)
		require.Equal(t, []string{c.pointer}, p.pointers(), name)
	}
	resp, body := e.sendBatch(t, "", "", batchBody(api.MaxBatchPosts+1, nil))
	p := requireBatchProblem(t, resp, body, http.StatusBadRequest)
	require.Contains(t, p.Detail, "at most 1000 posts")
	for _, malformed := range []string{``, `[]`, `{"posts":[`, `{"posts":[]} {}`} {
		resp, body := e.sendBatch(t, "", "", malformed)
		requireBatchProblem(t, resp, body, http.StatusBadRequest)
	}
	resp, body = e.doHeaders(t, http.MethodPost, batchPath, batchBody(1, nil), http.Header{"Content-Type": {"text/plain"}})
	requireBatchProblem(t, resp, body, http.StatusUnsupportedMediaType)
	check()

	// 413: straight to the handler, the body made as it is read, so the
	// test neither holds nor sends 80 MiB twice.
	h, err := api.NewHandler(api.Config{Posts: e.svc})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, batchPath,
		io.MultiReader(strings.NewReader(`{"posts":["`), io.LimitReader(xs{}, api.MaxBatchBodyBytes)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	requireBatchProblem(t, rec.Result(), rec.Body.Bytes(), http.StatusRequestEntityTooLarge)
	check()
}

// xs reads as an endless run of x.
type xs struct{}

func (xs) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// The batch body limit holds posts whose JSON is far over a single
// create's 1 MiB: 100 posts of the longest content in 2-byte characters.
func TestBatchCreateTakesBodiesOverTheSingleCreateLimit(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), nil)
	long := strings.Repeat("é", reservation.MaxContentLength)
	body := batchBody(100, func(i int) string {
		return `{"title":"p` + strconv.Itoa(i) + `","content":"` + long + `","scheduledAt":"2030-01-03T00:00:00Z"}`
	})
	require.Greater(t, len(body), 3*api.MaxBodyBytes)
	resp, got := e.sendBatch(t, "", "", body)
	posts := requireBatchCreated(t, resp, got, 100, false)
	require.Equal(t, long, loadPost(t, e.db.DB, idOf(t, posts[99])).Content)
}

// The write limit counts a batch's posts: with 10 writes per window, a
// batch of 4 leaves 6, a batch of 7 is then 429 and writes nothing, a
// batch of 6 passes and leaves none. A batch larger than the whole limit
// is refused with a detail that says to split it; a dry run spends one.
func TestBatchWriteLimitCountsPosts(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		e := apiSetup(t, db, func(c *api.Config) {
			c.Auth = verifier(t, testSecret, "")
			c.WriteLimit = api.WriteLimit{Requests: 10, Window: time.Hour}
		})
		alice, bob, carol := tokenFor(t, "alice"), tokenFor(t, "bob"), tokenFor(t, "carol")
		resp, body := e.sendBatch(t, alice, "", batchBody(4, nil))
		requireBatchCreated(t, resp, body, 4, false)
		require.Equal(t, "6", resp.Header.Get("X-RateLimit-Remaining"))

		check := writesNothing(t, db.DB)
		resp, body = e.sendBatch(t, alice, "", batchBody(7, nil))
		p := requireBatchProblem(t, resp, body, http.StatusTooManyRequests)
		require.Contains(t, p.Detail, "7 posts")
		require.Contains(t, p.Detail, "6 writes left")
		require.Equal(t, "3600", resp.Header.Get("Retry-After"))
		check()

		resp, body = e.sendBatch(t, alice, "", batchBody(6, nil))
		requireBatchCreated(t, resp, body, 6, false)
		resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/posts", newPostBody)
		requireProblem(t, resp, body, http.StatusTooManyRequests)
		posts, _ := counts(t, db.DB)
		require.EqualValues(t, 10, posts, "10 writes: 10 posts")

		check = writesNothing(t, db.DB)
		resp, body = e.sendBatch(t, bob, "", batchBody(11, nil))
		p = requireBatchProblem(t, resp, body, http.StatusTooManyRequests)
		require.Contains(t, p.Detail, "split it")
		check()

		// A dry run of 10 posts spends one write: 9 remain for a batch.
		resp, body = e.sendBatch(t, carol, "", `{"dryRun":true,"posts":[`+strings.Repeat(batchItem(0)+",", 9)+batchItem(9)+`]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "9", resp.Header.Get("X-RateLimit-Remaining"))
		resp, body = e.sendBatch(t, carol, "", batchBody(9, nil))
		requireBatchCreated(t, resp, body, 9, false)
	})
}

// A batch's posts belong to the token's subject, also for a token with the
// admin scope, and so do their events.
func TestBatchCreatePostsBelongToTheCaller(t *testing.T) {
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
		admin := tokenFor(t, "root", "posts:admin")
		resp, body := e.sendBatch(t, admin, "", batchBody(2, nil))
		for _, p := range requireBatchCreated(t, resp, body, 2, false) {
			require.Equal(t, "root", p["ownerId"])
			require.Equal(t, "root", loadPost(t, e.db.DB, idOf(t, p)).OwnerID)
		}
		var payloads []string
		require.NoError(t, e.db.Model(&outbox.Message{}).Order("id").Pluck("payload", &payloads).Error)
		require.Len(t, payloads, 2)
		for _, pl := range payloads {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(pl), &v))
			require.Equal(t, "root", v["ownerId"])
		}
		resp, body = e.sendBatch(t, "", "", batchBody(1, nil))
		requireBatchProblem(t, resp, body, http.StatusUnauthorized)
	})
}
