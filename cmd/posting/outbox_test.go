package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// outboxTestDB returns a fresh migrated database of the dialect and its URL,
// as an operator would pass it.
func outboxTestDB(t *testing.T, dialect database.Dialect) (*database.DB, string) {
	t.Helper()
	url := databasetest.URL(t, dialect, "posting_cli")
	db, err := database.Open(url, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = migrations.Apply(context.Background(), db, nil)
	require.NoError(t, err)
	return db, url
}

type outboxFixture struct {
	db                          *database.DB
	url                         string
	failed, held, sent, oldSent outbox.Message
}

// outboxSetup writes: post 1 with a FAIL head and a PENDING event held
// behind it, post 2 sent a minute ago, post 3 sent 30 days ago.
func outboxSetup(t *testing.T, dialect database.Dialect) *outboxFixture {
	t.Helper()
	db, url := outboxTestDB(t, dialect)
	base := time.Now().Add(-30 * 24 * time.Hour)
	write := func(post int64, at time.Time) outbox.Message { return reservationtest.Append(t, db.DB, post, at) }
	f := &outboxFixture{db: db, url: url,
		failed: write(1, base), held: write(1, base.Add(time.Second)),
		sent: write(2, base.Add(2*time.Second)), oldSent: write(3, base.Add(3*time.Second))}
	update := func(id int64, values map[string]any) {
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", id).Updates(values).Error)
	}
	update(f.failed.ID, map[string]any{"status": outbox.StatusFail, "retry_count": 4,
		"last_error": "kafka: message too large\n(broker said so)"})
	update(f.sent.ID, map[string]any{"status": outbox.StatusSent, "sent_at": database.Normalize(time.Now().Add(-time.Minute))})
	update(f.oldSent.ID, map[string]any{"status": outbox.StatusSent, "sent_at": database.Normalize(base.Add(time.Hour))})
	return f
}

func (f *outboxFixture) status(t *testing.T, id int64) outbox.Status {
	t.Helper()
	return databasetest.Load[outbox.Message](t, f.db.DB, id).Status
}

func outboxID(m outbox.Message) string { return strconv.FormatInt(m.ID, 10) }

// eachDialect runs fn in a parallel subtest per dialect, on the fixture
// setup builds in a fresh, migrated database of that dialect.
func eachDialect[F any](t *testing.T, setup func(*testing.T, database.Dialect) F, fn func(*testing.T, F)) {
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, setup(t, d))
		})
	}
}

func TestOutboxStats(t *testing.T) {
	t.Parallel()
	eachDialect(t, outboxSetup, func(t *testing.T, f *outboxFixture) {
		out, errOut, code := runCLI(t, "outbox", "stats", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `(?m)^STATUS\s+ROWS\s*$`, out)
		require.Regexp(t, `(?m)^PENDING\s+1\s*$`, out)
		require.Regexp(t, `(?m)^SENT\s+2\s*$`, out)
		require.Regexp(t, `(?m)^FAIL\s+1$`, out)
		require.Contains(t, out, "\nFAIL rows waiting for an operator: 1 (discarded: 0)\n")
		require.Contains(t, out, "oldest waiting: id "+outboxID(f.held)+" (post 1, PENDING)")
		require.Contains(t, out, "blocked behind a FAIL row of their post: 1\n")
		require.Regexp(t, `(?m)^`+outboxID(f.failed)+`\s+`+f.failed.EventID+`\s+1\s+1$`, out)

		out, errOut, code = runCLI(t, "outbox", "stats", "--json", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		var st map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		require.Equal(t, map[string]any{"PENDING": 1.0, "PROCESSING": 0.0, "SENT": 2.0, "RETRY": 0.0, "FAIL": 1.0}, st["counts"])
		require.EqualValues(t, 1, st["blocked"])
		require.EqualValues(t, 1, st["failed"])

		_, errOut, code = runCLI(t, "outbox", "stats", "extra", "--database-url", f.url)
		require.Equal(t, 2, code)
		require.Contains(t, errOut, `"extra"`)
	})
}

func TestOutboxList(t *testing.T) {
	t.Parallel()
	eachDialect(t, outboxSetup, func(t *testing.T, f *outboxFixture) {
		out, errOut, code := runCLI(t, "outbox", "list", "--status", "FAIL", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		require.Regexp(t, `^ID\s+EVENT ID\s+TYPE\s+POST ID\s+FAILED ATTEMPTS\s+CREATED\s+LAST ERROR$`, lines[0])
		require.Regexp(t, `^`+outboxID(f.failed)+`\s+`+f.failed.EventID+`\s+POSTING_EVENT\s+1\s+4\s+\S+Z\s+`+
			regexp.QuoteMeta("kafka: message too large (broker said so)")+`$`, lines[1])
		// The columns line up: the last error starts at the header's column.
		require.Equal(t, strings.Index(lines[0], "LAST ERROR"), strings.Index(lines[1], "kafka:"))

		out, errOut, code = runCLI(t, "outbox", "list", "--status", "sent", "--limit", "1", "--json", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		var got struct {
			Items []outbox.Entry `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Len(t, got.Items, 1)
		require.Equal(t, f.sent.ID, got.Items[0].ID, "oldest first")

		out, _, code = runCLI(t, "outbox", "list", "--status", "RETRY", "--database-url", f.url)
		require.Equal(t, 0, code)
		require.Equal(t, "no RETRY rows\n", out)

		requireUsageErrors(t, []string{"outbox", "list", "--database-url", f.url},
			flagErrors([]string{"--status", "DONE"}, []string{"--limit", "0"}, []string{"--limit", "x"})...)
	})
}

func TestOutboxRequeue(t *testing.T) {
	t.Parallel()
	eachDialect(t, outboxSetup, func(t *testing.T, f *outboxFixture) {
		out, errOut, code := runCLI(t, "outbox", "requeue", outboxID(f.failed), outboxID(f.sent), "999999",
			"--database-url", f.url)
		require.Equal(t, 1, code, "a refused id makes the exit status 1")
		require.Regexp(t, `(?m)^`+outboxID(f.failed)+`\s+requeued \(now PENDING\)$`, out)
		require.Regexp(t, `(?m)^`+outboxID(f.sent)+`\s+not requeued: status SENT, only FAIL rows can be requeued$`, out)
		require.Regexp(t, `(?m)^999999\s+not requeued: not found$`, out)
		require.Contains(t, errOut, "posting: 2 of 3 ids not requeued")
		require.Equal(t, outbox.StatusPending, f.status(t, f.failed.ID))
		require.Equal(t, outbox.StatusSent, f.status(t, f.sent.ID))

		requireUsageErrors(t, []string{"outbox", "requeue", "--database-url", f.url},
			refusal{[]string{"abc"}, `"abc"`},
			refusal{[]string{"0"}, `"0"`},
			refusal{nil, "at least one ID"},
			refusal{[]string{"--all-failed", "3"}, "not both"},
		)

		require.NoError(t, f.db.Model(&outbox.Message{}).Where("id = ?", f.failed.ID).Update("status", outbox.StatusFail).Error)
		out, errOut, code = runCLI(t, "outbox", "requeue", "--all-failed", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "requeued 1 FAIL rows\n", out)
		require.Equal(t, outbox.StatusPending, f.status(t, f.failed.ID))
	})
}

func TestOutboxDiscard(t *testing.T) {
	t.Parallel()
	eachDialect(t, outboxSetup, func(t *testing.T, f *outboxFixture) {
		out, errOut, code := runCLI(t, "outbox", "discard", outboxID(f.failed), "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `(?m)^`+outboxID(f.failed)+`\s+discarded \(now FAIL\)$`, out)
		st, err := outbox.Stats(context.Background(), f.db.DB, time.Now())
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Discarded)
		require.EqualValues(t, 0, st.Blocked)

		out, _, code = runCLI(t, "outbox", "requeue", outboxID(f.failed), "--database-url", f.url)
		require.Equal(t, 1, code)
		require.Contains(t, out, "not requeued: discarded at ")

		out, errOut, code = runCLI(t, "outbox", "discard", outboxID(f.sent), outboxID(f.failed), "--database-url", f.url)
		require.Equal(t, 1, code, "a refused id makes the exit status 1")
		require.Regexp(t, `(?m)^`+outboxID(f.sent)+`\s+not discarded: status SENT, only FAIL rows can be discarded$`, out)
		require.Regexp(t, `(?m)^`+outboxID(f.failed)+`\s+not discarded: already discarded at \S+Z$`, out)
		require.Contains(t, errOut, "posting: 2 of 2 ids not discarded")
		require.Equal(t, outbox.StatusSent, f.status(t, f.sent.ID))

		_, errOut, code = runCLI(t, "outbox", "discard", "--database-url", f.url)
		require.Equal(t, 2, code)
		require.Contains(t, errOut, "discard needs at least one ID")
	})
}

func TestOutboxPurge(t *testing.T) {
	t.Parallel()
	eachDialect(t, outboxSetup, func(t *testing.T, f *outboxFixture) {
		// Two more old SENT rows: three, one per statement, and a round
		// of 1ns reports after each statement that leaves rows.
		for post := int64(4); post <= 5; post++ {
			m := reservationtest.Append(t, f.db.DB, post, f.oldSent.Created)
			require.NoError(t, f.db.Model(&outbox.Message{}).Where("id = ?", m.ID).Updates(map[string]any{
				"status": outbox.StatusSent, "sent_at": f.oldSent.Created.Add(time.Hour)}).Error)
		}
		out, errOut, code := runCLI(t, "outbox", "purge", "--older-than", "168h", "--batch-size", "1", "--pause", "0s",
			"--progress-every", "1ns", "--database-url", f.url)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `^deleted 3 SENT rows sent before \S+Z\n$`, out)
		require.Regexp(t, `(?s)msg="purge progress" .*deleted=1 remaining=2 sent_before=\S+Z\n.*`+
			`msg="purge progress" .*deleted=2 remaining=1 sent_before=\S+Z\n.*msg=audit .*action=outbox.purge .* deleted=3 `, errOut)
		require.Equal(t, 2, strings.Count(errOut, "purge progress"), errOut)
		var left []int64
		require.NoError(t, f.db.Model(&outbox.Message{}).Order("id").Pluck("id", &left).Error)
		require.Equal(t, []int64{f.failed.ID, f.held.ID, f.sent.ID}, left)

		requireUsageErrors(t, []string{"outbox", "purge", "--database-url", f.url},
			flagErrors([]string{"--older-than", "0s"}, []string{"--older-than", "soon"}, []string{"--batch-size", "0"},
				[]string{"--pause", "-1s"}, []string{"--progress-every", "0s"})...)
	})
}

// The database URL comes from POSTING_DATABASE_URL; the options of one
// invocation have no environment twin. Not parallel: it sets variables.
func TestOutboxEnvironment(t *testing.T) {
	f := outboxSetup(t, database.SQLite)
	t.Setenv("POSTING_DATABASE_URL", f.url)
	t.Setenv("POSTING_STATUS", "BOGUS")
	t.Setenv("POSTING_JSON", "true")
	out, errOut, code := runCLI(t, "outbox", "list")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^`+outboxID(f.failed)+`\s`, out)

	t.Setenv("POSTING_LOG_FORMAT", "yaml")
	_, errOut, code = runCLI(t, "outbox", "stats")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "POSTING_LOG_FORMAT")

	t.Setenv("POSTING_LOG_FORMAT", "text")
	t.Setenv("POSTING_DATABASE_URL", "ftp://nowhere")
	_, errOut, code = runCLI(t, "outbox", "stats")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "POSTING_DATABASE_URL")
}
