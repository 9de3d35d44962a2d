package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

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
		postsBefore, rowsBefore := counts(t, e.db.DB)
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
		postsAfter, rowsAfter := counts(t, e.db.DB)
		require.Equal(t, postsBefore, postsAfter, "posts written by refused requests")
		require.Equal(t, rowsBefore, rowsAfter, "outbox rows written by refused requests")
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
