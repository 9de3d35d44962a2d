package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

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
