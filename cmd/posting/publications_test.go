package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

type publicationsFixture struct {
	db  *database.DB
	url string
	// refused: FAILED, post WORKING; cancelled: FAILED, post CANCELLED;
	// pending: PENDING, post WORKING.
	refused, cancelled, pending int64
}

func publicationsSetup(t *testing.T, dialect database.Dialect) *publicationsFixture {
	t.Helper()
	db, url := outboxTestDB(t, dialect)
	now := database.Normalize(time.Now())
	write := func(post reservation.Status, pub worker.PublicationStatus, lastError string) int64 {
		p := &reservation.Post{Title: "t", Content: "c", Status: post, ScheduledAt: now.Add(-time.Minute), CreatedAt: now, UpdatedAt: now}
		require.NoError(t, db.Create(p).Error)
		row := worker.Publication{PostID: p.ID, EventID: "0193a1b2-0000-7000-8000-00000000000" + strconv.FormatInt(p.ID, 10),
			ScheduledAt: p.ScheduledAt, Status: pub, CreatedAt: now, UpdatedAt: now}
		if lastError != "" {
			row.Attempts, row.LastError = 1, &lastError
		}
		require.NoError(t, db.Create(&row).Error)
		return p.ID
	}
	return &publicationsFixture{db: db, url: url,
		refused:   write(reservation.StatusWorking, worker.PublicationFailed, "webhook refused: 422 Unprocessable Entity\n{\"error\":\"title\"}"),
		cancelled: write(reservation.StatusCancelled, worker.PublicationFailed, "webhook refused: 410 Gone"),
		pending:   write(reservation.StatusWorking, worker.PublicationPending, ""),
	}
}

func (f *publicationsFixture) status(t *testing.T, id int64) worker.PublicationStatus {
	t.Helper()
	return databasetest.Load[worker.Publication](t, f.db.DB, id).Status
}

func TestPublicationsList(t *testing.T) {
	t.Parallel()
	eachDialect(t, publicationsSetup, func(t *testing.T, f *publicationsFixture) {
		out, errOut, code := runCLI(t, "publications", "list", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		require.Regexp(t, `^POST ID\s+POST STATUS\s+ATTEMPTS\s+SCHEDULED AT\s+UPDATED AT\s+LAST ERROR$`, lines[0])
		require.Regexp(t, `^`+strconv.FormatInt(f.refused, 10)+`\s+WORKING\s+1\s+\S+Z\s+\S+Z\s+`+
			regexp.QuoteMeta(`webhook refused: 422 Unprocessable Entity {"error":"title"}`)+`$`, lines[1])
		require.Regexp(t, `^`+strconv.FormatInt(f.cancelled, 10)+`\s+CANCELLED\s+1\s+`, lines[2])
		require.Regexp(t, `^[^\n]*msg="reading database"[^\n]*\n$`, errOut, "a read-only listing logs only the database it read")

		out, errOut, code = runCLI(t, "publications", "list", "--status", "failed", "--limit", "1",
			"--after", strconv.FormatInt(f.refused, 10), "--json", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		var got struct {
			Items []map[string]any `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Len(t, got.Items, 1)
		require.EqualValues(t, f.cancelled, got.Items[0]["postId"])
		require.Equal(t, "FAILED", got.Items[0]["status"])
		require.Equal(t, "CANCELLED", got.Items[0]["postStatus"])
		require.Equal(t, "webhook refused: 410 Gone", got.Items[0]["lastError"])

		out, _, code = runCLI(t, "publications", "list", "--status", "PUBLISHED", "--database-url", f.url)
		require.Equal(t, 0, code)
		require.Equal(t, "no PUBLISHED publications\n", out)

		requireUsageErrors(t, []string{"publications", "list", "--database-url", f.url},
			flagErrors([]string{"--status", "FAIL"}, []string{"--limit", "0"}, []string{"--limit", "1001"}, []string{"--after", "-1"})...)
	})
}

func TestPublicationsRetry(t *testing.T) {
	t.Parallel()
	eachDialect(t, publicationsSetup, func(t *testing.T, f *publicationsFixture) {
		id := func(n int64) string { return strconv.FormatInt(n, 10) }
		out, errOut, code := runCLI(t, "publications", "retry", id(f.refused), id(f.cancelled), id(f.pending), "999999",
			"--database-url", f.url)
		require.Equal(t, 1, code, "a refused id makes the exit status 1")
		require.Regexp(t, `(?m)^`+id(f.refused)+`\s+retried \(now PENDING\)$`, out)
		require.Regexp(t, `(?m)^`+id(f.cancelled)+`\s+not retried: post is CANCELLED, only a WORKING post is published$`, out)
		require.Regexp(t, `(?m)^`+id(f.pending)+`\s+not retried: publication is PENDING, only FAILED ones can be retried$`, out)
		require.Regexp(t, `(?m)^999999\s+not retried: not found$`, out)
		require.Contains(t, errOut, "posting: 3 of 4 ids not retried")
		require.Equal(t, worker.PublicationPending, f.status(t, f.refused))
		require.Equal(t, worker.PublicationFailed, f.status(t, f.cancelled))
		var p worker.Publication
		require.NoError(t, f.db.Where("post_id = ?", f.refused).Take(&p).Error)
		require.Zero(t, p.Attempts)
		require.Nil(t, p.LastError)

		requireUsageErrors(t, []string{"publications", "retry", "--database-url", f.url},
			refusal{[]string{"abc"}, `"abc"`},
			refusal{[]string{"-5"}, "-5"},
			refusal{nil, "at least one ID"},
		)
	})
}

// Operator commands print their result on stdout and their log lines on
// stderr, so `posting ... > result` holds the result alone.
func TestOperatorCommandsLogOnStderrOnly(t *testing.T) {
	t.Parallel()
	f := publicationsSetup(t, database.SQLite)
	out, errOut, code := runCLI(t, "publications", "retry", strconv.FormatInt(f.refused, 10), "--database-url", f.url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^POST ID\s+RESULT\n\d+\s+retried \(now PENDING\)\n$`, out)
	require.Regexp(t, `level=INFO msg=audit instance_id=\S+ action=publications.retry ids=\[`+strconv.FormatInt(f.refused, 10)+`\] source=cli os_user=\S+`, errOut)

	o := outboxSetup(t, database.SQLite)
	out, errOut, code = runCLI(t, "outbox", "requeue", outboxID(o.failed), "--log-format", "json", "--database-url", o.url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^ID\s+RESULT\n\d+\s+requeued \(now PENDING\)\n$`, out)
	require.Regexp(t, `"msg":"audit","instance_id":"[^"]+","action":"outbox.requeue","ids":\[`+outboxID(o.failed)+`\],"source":"cli","os_user":"`, errOut)

	out, errOut, code = runCLI(t, "outbox", "purge", "--pause", "0s", "--database-url", o.url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^deleted 1 SENT rows sent before \S+Z\n$`, out)
	require.Regexp(t, `msg=audit instance_id=\S+ action=outbox.purge ids=\[\] source=cli`, errOut)
	require.Contains(t, errOut, "deleted=1")
	require.NotContains(t, out, "level=")

	out, errOut, code = runCLI(t, "migrate", "--database-url", o.url)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^applied 0 migrations to \S+\n$`, out)
	require.Contains(t, errOut, `msg="migrations applied"`)
}

// A webhook receiver's answer reaches the operator's terminal escaped: the
// control characters of a refusal's text (ANSI sequences that clear the
// screen or retitle the window) are shown as escapes in the publications
// and outbox tables, never written raw.
func TestOperatorTablesEscapeOutsideText(t *testing.T) {
	t.Parallel()
	eachDialect(t, publicationsSetup, func(t *testing.T, f *publicationsFixture) {
		hostile := "webhook refused: 400 \x1b[2J\x1b[31mdone\x1b[0m\x07\x1b]0;pwned\x07"
		require.NoError(t, f.db.Model(&worker.Publication{}).Where("post_id = ?", f.refused).Update("last_error", hostile).Error)
		out, errOut, code := runCLI(t, "publications", "list", "--status", "FAILED", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "\x1b", "no raw escape reaches the terminal")
		require.NotContains(t, out, "\x07")
		require.Contains(t, out, `\x1b[2J`)
	})
}
