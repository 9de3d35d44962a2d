package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

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
		postsBefore, rowsBefore := counts(t, e.db.DB)
		for _, tc := range cases {
			resp, body := e.do(t, tc.method, tc.path, "application/json", tc.body)
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, tc.field, p.Field, tc.name)
			require.Contains(t, p.Detail, tc.detail, tc.name)
			require.Contains(t, p.Detail, tc.field, tc.name)
		}
		postsAfter, rowsAfter := counts(t, e.db.DB)
		require.Equal(t, postsBefore, postsAfter, "posts written by refused requests")
		require.Equal(t, rowsBefore, rowsAfter, "outbox rows written by refused requests")
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
