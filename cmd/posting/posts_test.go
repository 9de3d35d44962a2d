package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/overdue/overduetest"
	"github.com/postingsvc/posting/internal/storage/database"
)

type postsFixture struct {
	*overduetest.Fixture
	url string
}

func postsSetup(t *testing.T, dialect database.Dialect) *postsFixture {
	t.Helper()
	db, url := outboxTestDB(t, dialect)
	return &postsFixture{Fixture: overduetest.Seed(t, db), url: url}
}

// posting posts overdue prints the count and the oldest age, then one line
// per overdue post, longest overdue first, with its reason, events and
// publication; the posts within the grace or final are left out; --limit
// cuts the table, not the count; --json answers what the admin API does;
// the exit status is 0 with posts overdue.
func TestPostsOverdue(t *testing.T) {
	t.Parallel()
	eachDialect(t, postsSetup, func(t *testing.T, f *postsFixture) {
		out, errOut, code := runCLI(t, "posts", "overdue", "--database-url", f.url)
		require.Equal(t, 0, code, "posts overdue is a listing: exit 0 with posts overdue\n%s", errOut)
		require.Regexp(t, `^overdue posts: 7 \(more than 5m0s past their scheduledAt\), the oldest 7h0m\d+s past it\n\n`, out)
		require.NotContains(t, out, "showing the")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Regexp(t, `^POST ID\s+STATUS\s+SCHEDULED AT\s+OVERDUE FOR\s+REASON\s+RE-ANNOUNCED\s+EVENT\s+PUBLICATION\s+DETAIL$`, lines[2])
		rows := lines[3 : 3+len(f.Overdue)]
		for i, id := range f.Overdue {
			require.Regexp(t, `^`+strconv.FormatInt(id, 10)+`\s+(RESERVED|WORKING)\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+\d+h\d+m\d+s\s+`+
				string(f.Reasons[i])+`\s`, rows[i], "longest overdue first")
		}
		require.Regexp(t, `\s+not_reserved\s+0\s+-\s+-\s+-$`, rows[0])
		require.Regexp(t, `\s+event_unsent\s+0\s+RETRY\s+-\s+kafka: broker not available$`, rows[1])
		require.Regexp(t, `\s+event_failed\s+0\s+FAIL\s+-\s+kafka: message too large$`, rows[2])
		require.Regexp(t, `\s+no_publication\s+2\s+SENT\s+-\s+-$`, rows[3])
		require.Regexp(t, `\s+publication_failed\s+0\s+SENT\s+FAILED \(1 failed attempt\)\s+webhook refused: 422 Unprocessable Entity$`, rows[5])
		require.Regexp(t, `\s+publication_settled\s+0\s+SENT\s+PUBLISHED\s+-$`, rows[6])
		// The receiver's text is shown, its control characters escaped: none
		// reaches the terminal, and the line stays one line.
		require.Regexp(t, `\s+publication_pending\s+0\s+SENT\s+PENDING \(3 failed attempts\)\s+`+
			regexp.QuoteMeta(`webhook answered 503: \x1b[31mdown\x1b[0m retry later\x07\x1b]0;pwned\x07`)+`$`, rows[4])
		for _, b := range []byte(out) {
			require.False(t, b < 0x20 && b != '\n' || b == 0x7f, "control byte %#x in the output", b)
		}
		for _, id := range f.Quiet {
			require.NotRegexp(t, `(?m)^`+strconv.FormatInt(id, 10)+`\s`, out, "post %d is not overdue", id)
		}
		require.Contains(t, lines[len(lines)-1], "docs/operations.md#postingpostsoverdue")

		out, _, code = runCLI(t, "posts", "overdue", "--limit", "2", "--database-url", f.url)
		require.Equal(t, 0, code)
		require.Contains(t, out, "overdue posts: 7 ")
		require.Contains(t, out, "showing the 2 longest overdue (--limit)\n")
		require.Regexp(t, `(?m)^`+strconv.FormatInt(f.Overdue[1], 10)+`\s`, out)
		require.NotRegexp(t, `(?m)^`+strconv.FormatInt(f.Overdue[2], 10)+`\s`, out)

		// A grace longer than any post's age: none is overdue.
		out, _, code = runCLI(t, "posts", "overdue", "--overdue-after", "8h", "--database-url", f.url)
		require.Equal(t, 0, code)
		require.Equal(t, "no overdue posts: none is more than 8h0m0s past its scheduledAt\n", out)

		out, errOut, code = runCLI(t, "posts", "overdue", "--json", "--overdue-after", "5h30m", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		var got struct {
			Count         int              `json:"count"`
			OldestSeconds float64          `json:"oldestSeconds"`
			GraceSeconds  float64          `json:"graceSeconds"`
			Items         []map[string]any `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Equal(t, 2, got.Count, "the posts 7h and 6h overdue")
		require.EqualValues(t, 5.5*3600, got.GraceSeconds)
		require.InDelta(t, 7*3600, got.OldestSeconds, 60)
		require.Len(t, got.Items, 2)
		require.EqualValues(t, f.Overdue[0], got.Items[0]["postId"])
		require.Equal(t, "not_reserved", got.Items[0]["reason"])
		require.Equal(t, "RESERVED", got.Items[0]["status"])
		require.Nil(t, got.Items[0]["eventStatus"])
		require.Nil(t, got.Items[0]["detail"])
		require.Equal(t, "RETRY", got.Items[1]["eventStatus"])
		require.Equal(t, "kafka: broker not available", got.Items[1]["detail"])

		requireUsageErrors(t, []string{"posts", "overdue", "--database-url", f.url},
			refusal{[]string{"--limit", "0"}, "--limit"}, refusal{[]string{"--limit", "1001"}, "--limit"},
			refusal{[]string{"--overdue-after", "500ms"}, "POSTING_OVERDUE_AFTER"},
			refusal{[]string{"--overdue-after", "25h"}, "POSTING_OVERDUE_AFTER"},
			refusal{[]string{"--overdue-after", "soon"}, "--overdue-after"},
			refusal{[]string{"extra"}, "takes no arguments"})
	})
}

// --overdue-after has serve's environment twin, so an operator counts what
// serve counts; the flag wins over it, and a bad one is named.
func TestPostsOverdueReadsServesGrace(t *testing.T) {
	t.Parallel()
	f := postsSetup(t, database.SQLite)
	out, code := runBinary(t, []string{"POSTING_DATABASE_URL=" + f.url, "POSTING_OVERDUE_AFTER=6h30m"}, "posts", "overdue")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "overdue posts: 1 (more than 6h30m0s past their scheduledAt)")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + f.url, "POSTING_OVERDUE_AFTER=6h30m"},
		"posts", "overdue", "--overdue-after", "5m")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "overdue posts: 7 ")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + f.url, "POSTING_OVERDUE_AFTER=later"}, "posts", "overdue")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `invalid POSTING_OVERDUE_AFTER="later"`)
}
