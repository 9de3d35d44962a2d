package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// requirePostShape checks that a post object has exactly the contract's
// fields with their JSON types, times in RFC 3339 UTC.
func requirePostShape(t *testing.T, post map[string]any) {
	t.Helper()
	keys := make([]string, 0, len(post))
	for k := range post {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	require.Equal(t, []string{"content", "createdAt", "id", "ownerId", "publishBy", "publishedAt", "scheduledAt", "status", "title", "updatedAt"}, keys)
	require.IsType(t, float64(0), post["id"])
	require.IsType(t, "", post["ownerId"])
	require.Nil(t, post["publishedAt"])
	for _, k := range []string{"scheduledAt", "createdAt", "updatedAt"} {
		s, ok := post[k].(string)
		require.True(t, ok, k)
		require.True(t, strings.HasSuffix(s, "Z"), "%s=%s is UTC", k, s)
		_, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err, k)
	}
}

// actions returns the POSTING_EVENT actions recorded for a post, in order.
func actions(t *testing.T, db *gorm.DB, id string) []string {
	t.Helper()
	var msgs []outbox.Message
	require.NoError(t, db.Where("aggregate_id = ?", id).Order("id").Find(&msgs).Error)
	var out []string
	for _, m := range msgs {
		require.Equal(t, string(event.PostingEvent), m.EventType)
		var payload map[string]any
		require.NoError(t, json.Unmarshal([]byte(m.Payload), &payload))
		out = append(out, payload["action"].(string)+" "+payload["status"].(string))
	}
	return out
}

func TestPostsLifecycle(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {

		resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json; charset=utf-8",
			`{"title":"Hello","content":"World","scheduledAt":"2030-01-03T10:00:00+02:00"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		created := decodeObject(t, body)
		requirePostShape(t, created)
		id := idOf(t, created)
		require.Equal(t, "/api/v1/posts/"+id, resp.Header.Get("Location"))
		require.Equal(t, "Hello", created["title"])
		require.Equal(t, "World", created["content"])
		require.Equal(t, "RESERVED", created["status"])
		require.Equal(t, "2030-01-03T08:00:00Z", created["scheduledAt"])
		require.Equal(t, "2030-01-02T03:04:05Z", created["createdAt"])
		require.Equal(t, "2030-01-02T03:04:05Z", created["updatedAt"])

		resp, body = e.do(t, http.MethodGet, resp.Header.Get("Location"), "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, created, decodeObject(t, body))

		resp, body = e.do(t, http.MethodPatch, "/api/v1/posts/"+id, "application/json",
			`{"title":"Hello again","scheduledAt":"2030-01-04T00:00:00.5Z"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		updated := decodeObject(t, body)
		requirePostShape(t, updated)
		require.Equal(t, "Hello again", updated["title"])
		require.Equal(t, "World", updated["content"])
		require.Equal(t, "2030-01-04T00:00:00.5Z", updated["scheduledAt"])
		stored := loadPost(t, e.db.DB, id)
		require.Equal(t, "Hello again", stored.Title)
		require.Equal(t, int64(2), stored.Version.Int64)

		resp, body = e.do(t, http.MethodGet, "/api/v1/posts", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		page := decodeObject(t, body)
		require.Len(t, page["items"], 1)
		require.Equal(t, updated, page["items"].([]any)[0])
		require.Equal(t, "", page["nextCursor"])

		resp, body = e.do(t, http.MethodPost, "/api/v1/posts/"+id+"/cancel", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		cancelled := decodeObject(t, body)
		requirePostShape(t, cancelled)
		require.Equal(t, "CANCELLED", cancelled["status"])
		require.Equal(t, reservation.StatusCancelled, loadPost(t, e.db.DB, id).Status)

		require.Equal(t, []string{"CREATED RESERVED", "UPDATED RESERVED", "CANCELLED CANCELLED"}, actions(t, e.db.DB, id))
	})
}

// TestPostsErrors sends each refused request and checks its problem and that
// it wrote nothing.
func TestPostsErrors(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		reserved := idOf(t, e.createPost(t, "reserved"))
		cancelled := idOf(t, e.createPost(t, "cancelled"))
		resp, body := e.do(t, http.MethodPost, "/api/v1/posts/"+cancelled+"/cancel", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		published := idOf(t, e.createPost(t, "published"))
		require.NoError(t, e.db.Exec("UPDATE posts SET status = 'PUBLISHED' WHERE id = ?", published).Error)

		const jsonCT = "application/json"
		valid := func(extra string) string {
			return `{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:00Z"` + extra + `}`
		}
		huge := `{"title":"t","content":"` + strings.Repeat("x", 1<<20) + `","scheduledAt":"2030-01-03T00:00:00Z"}`
		posts := "/api/v1/posts"
		one := posts + "/" + reserved
		cases := []struct {
			name, method, path, contentType, body string
			status                                int
			detail, field, allow                  string
		}{
			{"malformed JSON", "POST", posts, jsonCT, `{"title":`, 400, "malformed JSON", "", ""},
			{"JSON syntax error", "POST", posts, jsonCT, `{"title" "t"}`, 400, "malformed JSON", "", ""},
			{"unknown field", "POST", posts, jsonCT, valid(`,"author":"me"`), 400, "author", "author", ""},
			{"trailing data", "POST", posts, jsonCT, valid("") + ` {}`, 400, "after the JSON object", "", ""},
			{"trailing garbage", "POST", posts, jsonCT, valid("") + `x`, 400, "after the JSON object", "", ""},
			{"empty body", "POST", posts, jsonCT, ``, 400, "empty", "", ""},
			{"array body", "POST", posts, jsonCT, `[]`, 400, "JSON object", "", ""},
			{"missing title", "POST", posts, jsonCT, `{"content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`, 400, "title", "title", ""},
			{"null title", "POST", posts, jsonCT, `{"title":null,"content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`, 400, "title", "title", ""},
			{"title not a string", "POST", posts, jsonCT, `{"title":5,"content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`, 400, "title", "title", ""},
			{"title too long", "POST", posts, jsonCT, `{"title":"` + strings.Repeat("é", 201) + `","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`, 400, "title", "title", ""},
			{"empty content", "POST", posts, jsonCT, `{"title":"t","content":"","scheduledAt":"2030-01-03T00:00:00Z"}`, 400, "content", "content", ""},
			{"content too long", "POST", posts, jsonCT, `{"title":"t","content":"` + strings.Repeat("x", 20001) + `","scheduledAt":"2030-01-03T00:00:00Z"}`, 400, "content", "content", ""},
			{"missing scheduledAt", "POST", posts, jsonCT, `{"title":"t","content":"c"}`, 400, "scheduledAt", "scheduledAt", ""},
			{"scheduledAt not RFC 3339", "POST", posts, jsonCT, `{"title":"t","content":"c","scheduledAt":"tomorrow"}`, 400, "scheduledAt", "scheduledAt", ""},
			{"scheduledAt without zone", "POST", posts, jsonCT, `{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:00"}`, 400, "scheduledAt", "scheduledAt", ""},
			{"scheduledAt in the past", "POST", posts, jsonCT, `{"title":"t","content":"c","scheduledAt":"2030-01-02T03:04:04Z"}`, 400, "future", "scheduledAt", ""},
			{"scheduledAt over a year ahead", "POST", posts, jsonCT, `{"title":"t","content":"c","scheduledAt":"2031-01-03T00:00:00Z"}`, 400, "365 days", "scheduledAt", ""},
			{"publishBy not RFC 3339", "POST", posts, jsonCT, valid(`,"publishBy":"later"`), 400, "publishBy", "publishBy", ""},
			{"null publishBy", "POST", posts, jsonCT, valid(`,"publishBy":null`), 400, "publishBy", "publishBy", ""},
			{"publishBy before scheduledAt", "POST", posts, jsonCT, valid(`,"publishBy":"2030-01-02T23:59:59Z"`), 400, "before scheduledAt", "publishBy", ""},
			{"patch publishBy before scheduledAt", "PATCH", one, jsonCT, `{"publishBy":"2030-01-02T23:59:59Z"}`, 400, "before scheduledAt", "publishBy", ""},
			{"id not a number", "GET", posts + "/abc", "", "", 400, "id", "id", ""},
			{"id zero", "GET", posts + "/0", "", "", 400, "id", "id", ""},
			{"id negative", "GET", posts + "/-1", "", "", 400, "id", "id", ""},
			{"id with sign", "GET", posts + "/+1", "", "", 400, "id", "id", ""},
			{"id overflows", "GET", posts + "/99999999999999999999", "", "", 400, "id", "id", ""},
			{"patch bad id", "PATCH", posts + "/x", jsonCT, `{"title":"t"}`, 400, "id", "id", ""},
			{"cancel bad id", "POST", posts + "/1.5/cancel", "", "", 400, "id", "id", ""},
			{"patch null title", "PATCH", one, jsonCT, `{"title":null}`, 400, "title", "title", ""},
			{"patch empty title", "PATCH", one, jsonCT, `{"title":""}`, 400, "title", "title", ""},
			{"patch nothing", "PATCH", one, jsonCT, `{}`, 400, "at least one", "body", ""},
			{"patch scheduledAt in the past", "PATCH", one, jsonCT, `{"scheduledAt":"2029-01-01T00:00:00Z"}`, 400, "scheduledAt", "scheduledAt", ""},
			{"patch unknown field", "PATCH", one, jsonCT, `{"status":"PUBLISHED"}`, 400, "status", "status", ""},
			{"patch malformed JSON", "PATCH", one, jsonCT, `{"title":"t"`, 400, "malformed JSON", "", ""},
			{"list limit zero", "GET", posts + "?limit=0", "", "", 400, "limit", "limit", ""},
			{"list limit too big", "GET", posts + "?limit=101", "", "", 400, "limit", "limit", ""},
			{"list limit not a number", "GET", posts + "?limit=ten", "", "", 400, "limit", "limit", ""},
			{"list unknown status", "GET", posts + "?status=DONE", "", "", 400, "status", "status", ""},
			{"list bad cursor", "GET", posts + "?cursor=" + url.QueryEscape("!!"), "", "", 400, "cursor", "cursor", ""},

			{"get absent", "GET", posts + "/999999", "", "", 404, "999999", "", ""},
			{"patch absent", "PATCH", posts + "/999999", jsonCT, `{"title":"t"}`, 404, "999999", "", ""},
			{"cancel absent", "POST", posts + "/999999/cancel", "", "", 404, "999999", "", ""},
			{"unknown path", "GET", "/nope", "", "", 404, "/nope", "", ""},
			{"unknown sub-resource", "GET", one + "/comments", "", "", 404, "comments", "", ""},
			{"trailing slash", "GET", posts + "/", "", "", 404, "/api/v1/posts/", "", ""},
			{"unknown API version", "POST", "/api/v2/posts", jsonCT, valid(""), 404, "/api/v2/posts", "", ""},

			{"delete a post", "DELETE", one, "", "", 405, "DELETE", "", "PATCH"},
			{"put the collection", "PUT", posts, jsonCT, valid(""), 405, "PUT", "", "POST"},
			{"get cancel", "GET", one + "/cancel", "", "", 405, "GET", "", "POST"},
			{"post healthz", "POST", "/healthz", jsonCT, `{}`, 405, "POST", "", "GET"},

			{"patch cancelled", "PATCH", posts + "/" + cancelled, jsonCT, `{"title":"t"}`, 409, "CANCELLED", "", ""},
			{"patch published", "PATCH", posts + "/" + published, jsonCT, `{"title":"t"}`, 409, "PUBLISHED", "", ""},
			{"cancel cancelled", "POST", posts + "/" + cancelled + "/cancel", "", "", 409, "CANCELLED", "", ""},
			{"cancel published", "POST", posts + "/" + published + "/cancel", "", "", 409, "PUBLISHED", "", ""},

			{"create too large", "POST", posts, jsonCT, huge, 413, "1048576", "", ""},
			{"patch too large", "PATCH", one, jsonCT, huge, 413, "1048576", "", ""},

			{"create as text", "POST", posts, "text/plain", valid(""), 415, "text/plain", "", ""},
			{"create without content type", "POST", posts, "", valid(""), 415, "Content-Type", "", ""},
			{"create as form", "POST", posts, "application/x-www-form-urlencoded", "title=t", 415, "form", "", ""},
			{"create with broken content type", "POST", posts, "application/json; =", valid(""), 415, "Content-Type", "", ""},
			{"create as a JSON suffix type", "POST", posts, "application/merge-patch+json", valid(""), 415, "merge-patch", "", ""},
			{"patch as text", "PATCH", one, "text/plain", `{"title":"t"}`, 415, "text/plain", "", ""},
		}
		before := loadPost(t, e.db.DB, reserved)
		requireWroteNothing := writesNothing(t, e.db.DB)
		for _, tc := range cases {
			resp, body := e.do(t, tc.method, tc.path, tc.contentType, tc.body)
			p := requireProblem(t, resp, body, tc.status)
			require.Contains(t, p.Detail, tc.detail, tc.name)
			require.Equal(t, tc.field, p.Field, tc.name)
			if tc.allow != "" {
				require.Contains(t, resp.Header.Get("Allow"), tc.allow, tc.name)
			}
		}
		requireWroteNothing()
		after := loadPost(t, e.db.DB, reserved)
		require.Equal(t, before.Title, after.Title)
		require.Equal(t, before.Version, after.Version)
		require.True(t, before.UpdatedAt.Equal(after.UpdatedAt))
	})
}

func TestPostsListPagination(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		var all, cancelled []string
		for i := range 5 {
			id := idOf(t, e.createPost(t, fmt.Sprintf("post %d", i)))
			all = append(all, id)
			if i%2 == 0 {
				resp, body := e.do(t, http.MethodPost, "/api/v1/posts/"+id+"/cancel", "", "")
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				cancelled = append(cancelled, id)
			}
		}
		walk := func(query string) (ids []string, pages int) {
			path := "/api/v1/posts?" + query
			for {
				resp, body := e.do(t, http.MethodGet, path, "", "")
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				var page struct {
					Items      []map[string]any `json:"items"`
					NextCursor *string          `json:"nextCursor"`
				}
				require.NoError(t, json.Unmarshal(body, &page))
				require.NotNil(t, page.Items, "items is an array, also when empty")
				require.NotNil(t, page.NextCursor, "nextCursor is always present")
				pages++
				for _, p := range page.Items {
					requirePostShape(t, p)
					ids = append(ids, idOf(t, p))
				}
				if *page.NextCursor == "" {
					return ids, pages
				}
				path = "/api/v1/posts?" + query + "&cursor=" + url.QueryEscape(*page.NextCursor)
				require.Less(t, pages, 10, "pagination does not end")
			}
		}
		ids, pages := walk("limit=2")
		require.Equal(t, all, ids)
		require.Equal(t, 3, pages)
		ids, pages = walk("limit=1&status=CANCELLED")
		require.Equal(t, cancelled, ids)
		require.Equal(t, 3, pages)
		ids, pages = walk("status=RESERVED")
		require.Equal(t, []string{all[1], all[3]}, ids)
		require.Equal(t, 1, pages)
		ids, _ = walk("status=PUBLISHED")
		require.Empty(t, ids)
	})
}

// TestPostsConcurrentPatch: two PATCHes that read the same version give one
// 200 and one 409; many concurrent PATCHes leave one version bump and one
// UPDATED event per 200.
func TestPostsConcurrentPatch(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		id := idOf(t, e.createPost(t, "original"))

		// Hold each PATCH after it read the post until both have read it.
		var armed atomic.Bool
		var reads sync.WaitGroup
		reads.Add(2)
		bothRead := make(chan struct{})
		go func() { reads.Wait(); close(bothRead) }()
		// The first two reads are the PATCHes' own, before they write;
		// later ones (a group's lock of the rows it changes) pass.
		var seen atomic.Int32
		databasetest.After(t, e.db.DB, databasetest.StmtQuery, func(tx *gorm.DB) {
			if armed.Load() && tx.Statement.Table == "posts" && seen.Add(1) <= 2 {
				reads.Done()
				select {
				case <-bothRead:
				case <-time.After(10 * time.Second):
				}
			}
		})
		armed.Store(true)
		codes := make([]int, 2)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				resp, _ := e.do(t, http.MethodPatch, "/api/v1/posts/"+id, "application/json", fmt.Sprintf(`{"title":"from %d"}`, i))
				codes[i] = resp.StatusCode
			})
		}
		wg.Wait()
		armed.Store(false)
		slices.Sort(codes)
		require.Equal(t, []int{http.StatusOK, http.StatusConflict}, codes)
		require.Equal(t, int64(2), loadPost(t, e.db.DB, id).Version.Int64)

		const n = 12
		var ok, conflict atomic.Int64
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resp, body := e.do(t, http.MethodPatch, "/api/v1/posts/"+id, "application/json", fmt.Sprintf(`{"content":"edit %d"}`, i))
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusConflict:
					conflict.Add(1)
				default:
					t.Errorf("PATCH: %d %s", resp.StatusCode, body)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(n), ok.Load()+conflict.Load())
		require.Positive(t, ok.Load())
		// One version bump per 200, counting the first round's winner.
		require.Equal(t, 2+ok.Load(), loadPost(t, e.db.DB, id).Version.Int64)
		updates := 0
		for _, a := range actions(t, e.db.DB, id) {
			if a == "UPDATED RESERVED" {
				updates++
			}
		}
		require.EqualValues(t, 1+ok.Load(), updates)
		t.Logf("%d × 200, %d × 409", ok.Load(), conflict.Load())
	})
}

// TestPostsRefuseInvalidText: a title or content that is not valid UTF-8
// (raw bytes or an unpaired surrogate escape, which encoding/json would
// quietly turn into U+FFFD), or that holds a control character the field
// does not allow, is a 400 naming the field, on create and on PATCH, and
// writes nothing.
func TestPostsRefuseInvalidText(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		id := idOf(t, e.createPost(t, "kept"))
		one := "/api/v1/posts/" + id
		const at = `"2030-01-03T00:00:00Z"`
		create := func(title, content string) string {
			return `{"title":"` + title + `","content":"` + content + `","scheduledAt":` + at + `}`
		}
		cases := []struct {
			name, title, content, field, detail string
		}{
			{"title with an invalid byte", "a\xffb", "c", "title", "UTF-8"},
			{"title with a truncated sequence", "caf\xc3", "c", "title", "UTF-8"},
			{"title with an overlong encoding", "\xc0\xaf", "c", "title", "UTF-8"},
			{"title with an encoded surrogate", "\xed\xa0\x80", "c", "title", "UTF-8"},
			{"title with a lone high surrogate escape", `a\ud800b`, "c", "title", "surrogate"},
			{"title with a lone low surrogate escape", `\udc00`, "c", "title", "surrogate"},
			{"title with reversed surrogate escapes", `\ude00\ud83d`, "c", "title", "surrogate"},
			{"title with a newline", `two\nlines`, "c", "title", "U+000A"},
			{"title with a tab", `a\tb`, "c", "title", "U+0009"},
			{"title with a carriage return", `a\rb`, "c", "title", "U+000D"},
			{"title with NUL", `a\u0000b`, "c", "title", "U+0000"},
			{"title with an escape sequence", `\u001b[31mred`, "c", "title", "U+001B"},
			{"title with DEL", "a\x7fb", "c", "title", "U+007F"},
			{"title with a C1 control", `a\u0085b`, "c", "title", "U+0085"},
			{"title with a raw C1 control", "a\xc2\x9bb", "c", "title", "U+009B"},
			{"content with an invalid byte", "t", "ok\xfe", "content", "UTF-8"},
			{"content with a lone surrogate escape", "t", `\ud83d`, "content", "surrogate"},
			{"content with NUL", "t", `a\u0000b`, "content", "U+0000"},
			{"content with an escape sequence", "t", `\u001b[2J`, "content", "U+001B"},
			{"content with a vertical tab", "t", `a\u000bb`, "content", "U+000B"},
			{"content with DEL", "t", `a\u007fb`, "content", "U+007F"},
			{"content with a C1 control", "t", `a\u009fb`, "content", "U+009F"},
		}
		before := loadPost(t, e.db.DB, id)
		requireWroteNothing := writesNothing(t, e.db.DB)
		for _, tc := range cases {
			resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json", create(tc.title, tc.content))
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, tc.field, p.Field, "create: %s", tc.name)
			require.Contains(t, p.Detail, tc.detail, "create: %s", tc.name)

			patch := `{"title":"` + tc.title + `"}`
			if tc.field == "content" {
				patch = `{"content":"` + tc.content + `"}`
			}
			resp, body = e.do(t, http.MethodPatch, one, "application/json", patch)
			p = requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, tc.field, p.Field, "patch: %s", tc.name)
			require.Contains(t, p.Detail, tc.detail, "patch: %s", tc.name)
		}
		requireWroteNothing()
		after := loadPost(t, e.db.DB, id)
		require.Equal(t, before.Title, after.Title)
		require.Equal(t, before.Content, after.Content)
		require.Equal(t, before.Version, after.Version)

		// What is text stays allowed: content keeps tabs and line ends, a
		// surrogate pair is one character, U+FFFD sent as such is a
		// character like any other.
		resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
			create(`smile \ud83d\ude00 \ufffd`+"\xef\xbf\xbd", `line 1\r\nline 2\n\tindented`))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		stored := loadPost(t, e.db.DB, idOf(t, decodeObject(t, body)))
		require.Equal(t, "smile 😀 \uFFFD\uFFFD", stored.Title)
		require.Equal(t, "line 1\r\nline 2\n\tindented", stored.Content)

		resp, body = e.do(t, http.MethodPatch, one, "application/json", `{"content":"a\tb\nc"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "a\tb\nc", loadPost(t, e.db.DB, id).Content)
	})
}

// TestPostsReadFieldNamesExactly: a member name matches a field only as
// spelt (case-sensitive), and a name given twice is a 400 naming it, on
// create and on PATCH; nothing is written.
func TestPostsReadFieldNamesExactly(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		id := idOf(t, e.createPost(t, "kept"))
		const at = `"scheduledAt":"2030-01-03T00:00:00Z"`
		cases := []struct {
			name, method, path, body, field, detail string
		}{
			{"names in other case", "POST", "/api/v1/posts", `{"TITLE":"x","Content":"c","ScheduledAt":"2030-01-03T00:00:00Z"}`, "TITLE", "unknown field"},
			{"one name in other case", "POST", "/api/v1/posts", `{"title":"x","content":"c","scheduledat":"2030-01-03T00:00:00Z"}`, "scheduledat", "unknown field"},
			{"a second spelling", "POST", "/api/v1/posts", `{"title":"a","Title":"b","content":"c",` + at + `}`, "Title", "unknown field"},
			{"a repeated name", "POST", "/api/v1/posts", `{"title":"a","title":"b","content":"c",` + at + `}`, "title", "more than once"},
			{"a repeated name, escaped", "POST", "/api/v1/posts", `{"title":"a","content":"c","t\u0069tle":"b",` + at + `}`, "title", "more than once"},
			{"patch in other case", "PATCH", "/api/v1/posts/" + id, `{"Title":"b"}`, "Title", "unknown field"},
			{"patch repeated", "PATCH", "/api/v1/posts/" + id, `{"content":"a","content":"b"}`, "content", "more than once"},
		}
		requireWroteNothing := writesNothing(t, e.db.DB)
		for _, tc := range cases {
			resp, body := e.do(t, tc.method, tc.path, "application/json", tc.body)
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, tc.field, p.Field, tc.name)
			require.Contains(t, p.Detail, tc.detail, tc.name)
			require.Contains(t, p.Detail, tc.field, tc.name)
		}
		requireWroteNothing()
		require.Equal(t, "kept", loadPost(t, e.db.DB, id).Title)
	})
}

// refusedDateTimes are date-times the API refuses, each with what the
// refusal says.
var refusedDateTimes = map[string]string{
	"2030-01-03T00:00:00+24:00": "must be an RFC 3339 date-time",
	"2030-01-03T00:00:00+23:60": "must be an RFC 3339 date-time",
	"2030-01-03T00:00:00,5Z":    "must be an RFC 3339 date-time",
	"2030-01-03T00:00:00.Z":     "must be an RFC 3339 date-time",
	"2030-01-03T00:00:00+0100":  "must be an RFC 3339 date-time",
	"2030-01-03 00:00:00Z":      "must be an RFC 3339 date-time",
	"2030-02-30T00:00:00Z":      "must be an RFC 3339 date-time",
	"2030-06-30T23:59:60Z":      "leap seconds are not accepted",
}

// TestPostsReadScheduledAtStrictly: scheduledAt is RFC 3339 and nothing
// more (offset hour 00..23, minute 00..59, '.' before a fraction); a leap
// second, valid syntax, is refused with its own reason. Valid offsets and
// fractions are still read, as the same instant.
func TestPostsReadScheduledAtStrictly(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		create := func(at string) string { return `{"title":"t","content":"c","scheduledAt":"` + at + `"}` }
		for at, detail := range refusedDateTimes {
			postsBefore, _ := counts(t, e.db.DB)
			resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json", create(at))
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, "scheduledAt", p.Field, at)
			require.Contains(t, p.Detail, detail, at)
			postsAfter, _ := counts(t, e.db.DB)
			require.Equal(t, postsBefore, postsAfter, at)
		}
		for at, want := range map[string]string{
			"2030-01-03T05:30:00.25+05:30": "2030-01-03T00:00:00.25Z",
			"2030-01-02T23:59:00-23:59":    "2030-01-03T23:58:00Z",
		} {
			resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json", create(at))
			require.Equal(t, http.StatusCreated, resp.StatusCode, "%s: %s", at, body)
			require.Equal(t, want, decodeObject(t, body)["scheduledAt"], at)
		}
	})
}

// TestPostsReadScheduledAtWithLowerCaseTAndZ: RFC 3339 (section 5.6, its
// note) lets "T" and "Z" be lower case, and JSON Schema validators of
// format date-time accept them, so a client that checked its body against
// /openapi.json must not get a 400 saying it is not RFC 3339.
func TestPostsReadScheduledAtWithLowerCaseTAndZ(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		for at, want := range map[string]string{
			"2030-01-03t00:00:00z":        "2030-01-03T00:00:00Z",
			"2030-01-03t05:30:00.5+05:30": "2030-01-03T00:00:00.5Z",
			"2030-01-03T00:00:00.25z":     "2030-01-03T00:00:00.25Z",
		} {
			resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
				`{"title":"t","content":"c","scheduledAt":"`+at+`"}`)
			require.Equal(t, http.StatusCreated, resp.StatusCode, "%s: %s", at, body)
			require.Equal(t, want, decodeObject(t, body)["scheduledAt"], at)
		}
	})
}

// TestPostsNameTheTopFieldOfARepeatedNameInsideAValue: a name repeated
// inside a field's value is refused naming the request's field (the one a
// client can fix), not the inner name, which is no field of a post.
func TestPostsNameTheTopFieldOfARepeatedNameInsideAValue(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		const at = `"scheduledAt":"2030-01-03T00:00:00Z"`
		for body, field := range map[string]string{
			`{"title":{"x":1,"x":2},"content":"c",` + at + `}`:        "title",
			`{"title":"t","content":[{"a":1,"\u0061":2}],` + at + `}`: "content",
		} {
			postsBefore, _ := counts(t, e.db.DB)
			resp, respBody := e.do(t, http.MethodPost, "/api/v1/posts", "application/json", body)
			p := requireProblem(t, resp, respBody, http.StatusBadRequest)
			require.Equal(t, field, p.Field, body)
			require.Contains(t, p.Detail, "appears more than once", body)
			postsAfter, _ := counts(t, e.db.DB)
			require.Equal(t, postsBefore, postsAfter, body)
		}
	})
}

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
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
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
		posts, rows := counts(t, e.db.DB)
		require.Equal(t, [2]int64{1, 2}, [2]int64{posts, rows}, "one post; its CREATED and UPDATED events only")
		require.Equal(t, []string{"CREATED RESERVED", "UPDATED RESERVED"}, actions(t, e.db.DB, id))

		// Keys are case-sensitive, and each owner has keys of its own.
		resp, body = e.createWithKey(t, alice, "ORDER-1", newPostBody)
		other := requireCreated(t, resp, body, false)
		resp, body = e.createWithKey(t, bob, "order-1", newPostBody)
		bobs := requireCreated(t, resp, body, false)
		require.NotEqual(t, id, other)
		require.NotEqual(t, id, bobs)
		require.Equal(t, "bob", loadPost(t, e.db.DB, bobs).OwnerID)
		posts, _ = counts(t, e.db.DB)
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
// purged or not yet. Keys are aged by the database's clock, so the test ages
// them by moving their created_at back.
func TestIdempotencyKeysExpireAfterTheRetention(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{IdempotencyRetention: 24 * time.Hour})
		require.NoError(t, err)
		e := apiSetup(t, db, func(c *api.Config) { c.Posts = svc })
		body := func(title string) string {
			return `{"title":"` + title + `","content":"c","scheduledAt":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
		}
		create := func(key, body string, replayed bool) string {
			resp, got := e.createWithKey(t, "", key, body)
			return requireCreated(t, resp, got, replayed)
		}
		age := func(key string, by time.Duration) {
			at := database.Normalize(databasetest.Now(t, db.DB).Add(-by))
			res := db.Table("idempotency_keys").Where("idem_key = ?", key).Update("created_at", at)
			require.NoError(t, res.Error)
			require.EqualValues(t, 1, res.RowsAffected)
		}
		oldBody, youngBody := body("old"), body("young")
		oldID := create("old", oldBody, false)
		youngID := create("young", youngBody, false)
		age("old", 25*time.Hour)
		age("young", 23*time.Hour)

		cleaner, err := outbox.NewCleaner(db.DB, outbox.CleanerConfig{},
			outbox.PurgeStep{Name: "idempotency_keys", Purge: reservation.PurgeIdempotencyKeys, Retention: 24 * time.Hour})
		require.NoError(t, err)
		res, err := cleaner.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Deleted["idempotency_keys"])

		require.Equal(t, youngID, create("young", youngBody, true), "a key within the retention replays")
		// Another body: a kept key would answer 422.
		require.NotEqual(t, oldID, create("old", body("again"), false), "a purged key creates a new post")

		// Not purged yet, but older than the retention.
		age("young", 24*time.Hour+time.Minute)
		lateID := create("young", youngBody, false)
		require.NotEqual(t, youngID, lateID)
		posts, rows := counts(t, db.DB)
		require.Equal(t, [2]int64{4, 4}, [2]int64{posts, rows})
		var keys int64
		require.NoError(t, db.Table("idempotency_keys").Count(&keys).Error)
		require.EqualValues(t, 2, keys, "old (new post) and young (new post); the expired rows are gone")
	})
}

// A key's age is judged by the database's clock, as the cleaner judges it:
// two API instances whose clocks are 6 minutes apart, with a retention of 1
// minute, both replay a key that either recorded a moment ago. By the
// instances' own clocks the key would be 6 minutes old at the one ahead,
// past its retention, and a client's retry there a second post.
func TestIdempotencyKeysAreAgedByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		instance := func(skew time.Duration) *apiEnv {
			svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{
				Now: func() time.Time { return time.Now().Add(skew) }, IdempotencyRetention: time.Minute})
			require.NoError(t, err)
			return apiSetup(t, db, func(c *api.Config) { c.Posts = svc })
		}
		behind, ahead := instance(-3*time.Minute), instance(3*time.Minute)
		body := `{"title":"t","content":"c","scheduledAt":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
		for _, order := range [][2]*apiEnv{{behind, ahead}, {ahead, behind}} {
			key := fmt.Sprintf("key-%p", order[0])
			resp, got := order[0].createWithKey(t, "", key, body)
			first := requireCreated(t, resp, got, false)
			resp, got = order[1].createWithKey(t, "", key, body)
			require.Equal(t, first, requireCreated(t, resp, got, true), "the other instance replays the key")
		}
		posts, rows := counts(t, db.DB)
		require.Equal(t, [2]int64{2, 2}, [2]int64{posts, rows})
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

// listWalk follows nextCursor from query to the last page and returns the
// ids in the order they came and the number of pages.
func (e *apiEnv) listWalk(t *testing.T, query string) (ids []string, pages int) {
	t.Helper()
	return e.listWalkFrom(t, query, "")
}

// listWalkFrom is listWalk starting at cursor ("" for the first page).
func (e *apiEnv) listWalkFrom(t *testing.T, query, cursor string) (ids []string, pages int) {
	t.Helper()
	path := "/api/v1/posts?" + query
	if cursor != "" {
		path += "&cursor=" + url.QueryEscape(cursor)
	}
	for {
		resp, body := e.do(t, http.MethodGet, path, "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		var page struct {
			Items      []map[string]any `json:"items"`
			NextCursor string           `json:"nextCursor"`
		}
		require.NoError(t, json.Unmarshal(body, &page))
		pages++
		for _, p := range page.Items {
			ids = append(ids, idOf(t, p))
		}
		if page.NextCursor == "" {
			return ids, pages
		}
		path = "/api/v1/posts?" + query + "&cursor=" + url.QueryEscape(page.NextCursor)
		require.Less(t, pages, 20, "pagination does not end")
	}
}

// TestPostsListRangeAndOrder: scheduledFrom (inclusive) and scheduledTo
// (exclusive) select by scheduled time, order=scheduledAt pages by time and
// then id, across pages, with and without a status; the default order stays
// by id.
func TestPostsListRangeAndOrder(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		// Created in this order (ids ascending), scheduled out of it; two
		// pairs share a time, so a page boundary falls between equal times.
		times := []string{
			"2030-01-05T00:00:00Z",   // 0
			"2030-01-03T00:00:00Z",   // 1
			"2030-01-04T00:00:00Z",   // 2
			"2030-01-03T00:00:00Z",   // 3
			"2030-01-06T12:00:00Z",   // 4
			"2030-01-04T00:00:00Z",   // 5
			"2030-01-03T12:00:00.5Z", // 6
		}
		ids := make([]string, len(times))
		for i, at := range times {
			resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
				fmt.Sprintf(`{"title":"post %d","content":"c","scheduledAt":%q}`, i, at))
			require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
			ids[i] = idOf(t, decodeObject(t, body))
		}
		resp, body := e.do(t, http.MethodPost, "/api/v1/posts/"+ids[5]+"/cancel", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		pick := func(idx ...int) []string {
			out := make([]string, len(idx))
			for i, n := range idx {
				out[i] = ids[n]
			}
			return out
		}
		byTime := pick(1, 3, 6, 2, 5, 0, 4)

		for _, tc := range []struct {
			query string
			want  []string
			pages int
		}{
			{"", ids, 1},
			{"limit=3", ids, 3},
			{"order=id&limit=3", ids, 3},
			{"order=scheduledAt&limit=1", byTime, 7},
			{"order=scheduledAt&limit=2", byTime, 4},
			{"order=scheduledAt&limit=3", byTime, 3},
			{"order=scheduledAt", byTime, 1},
			{"order=scheduledAt&status=RESERVED&limit=2", pick(1, 3, 6, 2, 0, 4), 3},
			{"order=scheduledAt&status=CANCELLED&limit=1", pick(5), 1},
			// from inclusive, to exclusive
			{"scheduledFrom=2030-01-04T00:00:00Z&limit=2", pick(0, 2, 4, 5), 2},
			{"scheduledTo=2030-01-04T00:00:00Z&limit=2", pick(1, 3, 6), 2},
			{"scheduledFrom=2030-01-03T12:00:00.5Z&scheduledTo=2030-01-05T00:00:00Z&order=scheduledAt&limit=2", pick(6, 2, 5), 2},
			{"scheduledFrom=" + url.QueryEscape("2030-01-03T13:00:00+01:00") + "&scheduledTo=2030-01-05T00:00:00.000001Z&order=scheduledAt&limit=2", pick(6, 2, 5, 0), 2},
			{"scheduledFrom=2030-01-04T00:00:00Z&scheduledTo=2030-01-06T00:00:00Z&status=RESERVED&order=scheduledAt&limit=1", pick(2, 0), 2},
			{"scheduledFrom=2031-01-01T00:00:00Z", nil, 1},
			// an empty value is the same as none
			{"status=&order=&scheduledFrom=&limit=&cursor=", ids, 1},
		} {
			got, pages := e.listWalk(t, tc.query)
			require.Equal(t, tc.want, got, tc.query)
			require.Equal(t, tc.pages, pages, tc.query)
		}

		// A post created between two pages is found in its place if it lies
		// after the position reached, and shifts nothing before it.
		resp, body = e.do(t, http.MethodGet, "/api/v1/posts?order=scheduledAt&limit=3", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		first := decodeObject(t, body)
		require.Len(t, first["items"], 3)
		cursor := first["nextCursor"].(string)
		resp, body = e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
			`{"title":"late","content":"c","scheduledAt":"2030-01-04T00:00:00Z"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		late := idOf(t, decodeObject(t, body))
		resp, body = e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
			`{"title":"early","content":"c","scheduledAt":"2030-01-02T12:00:00Z"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		rest, _ := e.listWalkFrom(t, "order=scheduledAt&limit=2", cursor)
		require.Equal(t, append(pick(2, 5), late, ids[0], ids[4]), rest)
	})
}

// cursorOf encodes raw as a cursor's text.
func cursorOf(raw string) string {
	return url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(raw)))
}

// TestPostsListRefusesBadParameters: an unknown, repeated or malformed
// parameter is a 400 naming it, never a list that ignores it.
func TestPostsListRefusesBadParameters(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		for range 3 {
			e.createPost(t, "p")
		}
		walkFirst := func(query string) string {
			resp, body := e.do(t, http.MethodGet, "/api/v1/posts?"+query, "", "")
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			c := decodeObject(t, body)["nextCursor"].(string)
			require.NotEmpty(t, c)
			return url.QueryEscape(c)
		}
		idCursor := walkFirst("limit=1")
		timeCursor := walkFirst("limit=1&order=scheduledAt")
		for _, tc := range []struct {
			query, field, detail string
		}{
			{"from=2030-01-01T00:00:00Z", "from", "unknown query parameter"},
			{"to=2030-01-01T00:00:00Z&limit=5", "to", "unknown query parameter"},
			{"Status=RESERVED", "Status", "unknown query parameter"},
			{"sort=scheduledAt", "sort", "scheduledFrom"},
			{"status=RESERVED&status=WORKING", "status", "at most once"},
			{"limit=1&limit=2", "limit", "at most once"},
			{"order=title", "order", "scheduledAt"},
			{"order=scheduledat", "order", "scheduledAt"},
			{"scheduledFrom=tomorrow", "scheduledFrom", "RFC 3339"},
			{"scheduledFrom=2030-01-01", "scheduledFrom", "RFC 3339"},
			{"scheduledTo=2030-01-01T00:00:00", "scheduledTo", "RFC 3339"},
			{"scheduledFrom=2030-01-01T00:00:00+01:00", "scheduledFrom", "%2B"},
			{"scheduledFrom=2030-01-02T00:00:00Z&scheduledTo=2030-01-02T00:00:00Z", "scheduledTo", "after scheduledFrom"},
			{"scheduledFrom=2030-01-02T00:00:00Z&scheduledTo=2030-01-01T00:00:00Z", "scheduledTo", "after scheduledFrom"},
			{"limit=0", "limit", "1 to 100"},
			{"limit=101", "limit", "1 to 100"},
			{"order=scheduledAt&cursor=" + idCursor, "cursor", "order=id"},
			{"cursor=" + timeCursor, "cursor", "order=scheduledAt"},
			{"order=id&cursor=" + timeCursor, "cursor", "order=scheduledAt"},
			{"order=scheduledAt&cursor=" + url.QueryEscape("MTow"), "cursor", "not a cursor"}, // "1:0": no post has id 0
			{"status=RESERVED&cursor=" + url.QueryEscape("YTox"), "cursor", "not a cursor"},   // "a:1"
			{"limit=1;status=RESERVED", "", "malformed query"},
			// Bounds and cursors beyond the years a database compares.
			{"scheduledFrom=0000-01-01T00:00:00Z", "scheduledFrom", "years 1 to 9999"},
			{"scheduledFrom=9999-12-31T23:59:59-23:59", "scheduledFrom", "years 1 to 9999"},
			{"scheduledTo=9999-12-31T23:59:59-23:59", "scheduledTo", "years 1 to 9999"},
			{"order=scheduledAt&cursor=" + cursorOf("9223372036854775807:1"), "cursor", "not a cursor"},
			{"order=scheduledAt&cursor=" + cursorOf("253402300800000000:1"), "cursor", "not a cursor"},
			{"order=scheduledAt&cursor=" + cursorOf("-9223372036854775807:1"), "cursor", "not a cursor"},
			{"ownerId=%FF%FE", "ownerId", "UTF-8"},
		} {
			resp, body := e.do(t, http.MethodGet, "/api/v1/posts?"+tc.query, "", "")
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, tc.field, p.Field, tc.query)
			require.Contains(t, p.Detail, tc.detail, tc.query)
		}
	})
}

// TestPostsListReadsScheduledBoundsAsStrictlyAsScheduledAt: scheduledFrom
// and scheduledTo are read by the same strict RFC 3339 rules as a post's
// scheduledAt: what the body refuses, the list refuses too, with the same
// reasons, and what it accepts (lower-case t and z) the list accepts.
func TestPostsListReadsScheduledBoundsAsStrictlyAsScheduledAt(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		for at, detail := range refusedDateTimes {
			for _, name := range []string{"scheduledFrom", "scheduledTo"} {
				resp, body := e.do(t, http.MethodGet, "/api/v1/posts?"+name+"="+url.QueryEscape(at), "", "")
				p := requireProblem(t, resp, body, http.StatusBadRequest)
				require.Equal(t, name, p.Field, at)
				require.Contains(t, p.Detail, detail, at)
			}
		}
		resp, body := e.do(t, http.MethodGet, "/api/v1/posts?scheduledFrom=2030-01-03t00:00:00z", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	})
}

// A post's publishBy is read like scheduledAt, shown in UTC, moved with a
// reschedule and changed by a PATCH of its own; a post has null without one.
func TestPostsCarryTheirPublishBy(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		resp, body := e.do(t, http.MethodPost, "/api/v1/posts", "application/json",
			`{"title":"t","content":"c","scheduledAt":"2030-01-03T10:00:00+02:00","publishBy":"2030-01-03T10:30:00+02:00"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		created := decodeObject(t, body)
		requirePostShape(t, created)
		require.Equal(t, "2030-01-03T08:30:00Z", created["publishBy"])
		id := idOf(t, created)

		resp, body = e.do(t, http.MethodPatch, "/api/v1/posts/"+id, "application/json", `{"scheduledAt":"2030-01-03T09:00:00Z"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "2030-01-03T09:30:00Z", decodeObject(t, body)["publishBy"], "the deadline moves with the schedule")

		resp, body = e.do(t, http.MethodPatch, "/api/v1/posts/"+id, "application/json", `{"publishBy":"2030-01-03T12:00:00Z"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "2030-01-03T12:00:00Z", decodeObject(t, body)["publishBy"])
		require.True(t, loadPost(t, e.db.DB, id).PublishBy.Equal(time.Date(2030, 1, 3, 12, 0, 0, 0, time.UTC)))

		plain := e.createPost(t, "no deadline")
		require.Contains(t, plain, "publishBy")
		require.Nil(t, plain["publishBy"])

		// EXPIRED is a status the list filters by.
		require.NoError(t, e.db.Exec("UPDATE posts SET status = 'EXPIRED' WHERE id = ?", id).Error)
		resp, body = e.do(t, http.MethodGet, "/api/v1/posts?status=EXPIRED", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		items := decodeObject(t, body)["items"].([]any)
		require.Len(t, items, 1)
		require.Equal(t, "EXPIRED", items[0].(map[string]any)["status"])
	})
}

// A page of large posts ends before it passes MaxPageBytes, and its
// nextCursor continues after the last post answered: walking the pages
// returns every post once, each answer bounded.
func TestPostsListPageIsBoundedInBytes(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		big := strings.Repeat("<", reservation.MaxContentLength) // 6 bytes each once escaped
		var want []string
		for range 40 {
			p, err := e.svc.Create(context.Background(), reservation.CreateInput{Title: "t", Content: big,
				ScheduledAt: testNow.Add(time.Hour)})
			require.NoError(t, err)
			want = append(want, strconv.FormatInt(p.ID, 10))
		}
		for _, order := range []string{"id", "scheduledAt"} {
			var got []string
			cursor, pages := "", 0
			for {
				resp, body := e.do(t, http.MethodGet, "/api/v1/posts?limit=100&order="+order+"&cursor="+url.QueryEscape(cursor), "", "")
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body[:min(len(body), 300)]))
				require.LessOrEqual(t, len(body), api.MaxPageBytes+200, "one answer's size")
				page := decodeObject(t, body)
				items := page["items"].([]any)
				require.NotEmpty(t, items)
				for _, it := range items {
					got = append(got, idOf(t, it.(map[string]any)))
				}
				pages++
				cursor = page["nextCursor"].(string)
				if cursor == "" {
					break
				}
			}
			require.Equal(t, want, got, "every post once, in order (%s)", order)
			require.Greater(t, pages, 4, "40 posts of ~120 KB take several pages of at most 1 MiB")
		}
	})
}
