package overdue_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// The indexes of the posts table (migrations 00001 and 00011) that keep the
// overdue check cheap.
var (
	indexStatusScheduledAt = "idx_posts_status_scheduled_at_id"
	indexStatusPublishBy   = "idx_posts_status_publish_by"
)

// The overdue check reads the posts table through its indexes, never by a
// scan of the whole table: on a table of 20,000 posts, most of them
// PUBLISHED as in a service that has run for a while, and its statistics
// up to date (ANALYZE), the planner of MariaDB and of PostgreSQL chooses
// (status, scheduled_at, id) for the count, the oldest, the listing and the
// re-announcement's search, (status, publish_by) for the search of posts
// past their publishBy, and the primary key for the expiry of the posts
// found. The statements are those the code runs, captured as it runs them
// (overdue.List and one Checker.RunOnce), so a change to a query is checked
// here. A realistic table rather than PostgreSQL's enable_seqscan = off:
// it shows the planner picks the index at the proportions the service
// lives with, not only that the index could serve, and the same holds on
// MariaDB, which has no such switch.
func TestOverdueCheckReadsPostsThroughTheirIndexes(t *testing.T) {
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			db := databasetest.New(t, d)
			ctx := context.Background()
			loadPosts(t, db)

			var capturing atomic.Bool
			var mu sync.Mutex
			var stmts []capturedStatement
			databasetest.After(t, db.DB, databasetest.StmtQuery|databasetest.StmtRow, func(tx *gorm.DB) {
				if !capturing.Load() || tx.Error != nil || tx.Statement.Table != "posts" {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				stmts = append(stmts, capturedStatement{sql: tx.Statement.SQL.String(), vars: append([]any(nil), tx.Statement.Vars...)})
			})
			capturing.Store(true)
			listed, sum, err := overdue.List(ctx, db.DB, time.Minute, 100)
			require.NoError(t, err)
			cfg := overdue.DefaultConfig()
			cfg.Grace, cfg.Interval, cfg.InstanceID, cfg.Logger = time.Minute, time.Second, "index-test", slog.New(slog.DiscardHandler)
			checker, err := overdue.New(db.DB, cfg)
			require.NoError(t, err)
			res, err := checker.RunOnce(ctx)
			require.NoError(t, err)
			capturing.Store(false)
			// The fixture has overdue posts, posts past their publishBy
			// and posts to re-announce, so every query ran, and not on
			// an empty range.
			require.Len(t, listed, overdueRows)
			require.Equal(t, overdueRows, sum.Count)
			require.Equal(t, expirableRows, res.Expired)
			require.Equal(t, overdueWorkingRows, res.Reannounced)

			mu.Lock()
			defer mu.Unlock()
			seen := map[string]int{}
			for _, s := range stmts {
				want, what := expectedIndex(s.sql)
				if want == "" {
					continue
				}
				seen[what]++
				plan := explainPlan(t, db, s)
				t.Logf("%s: %s\n%s", what, s.sql, plan)
				requireIndexScan(t, d, plan, want, what, s.sql)
			}
			t.Logf("statements explained: %v", seen)
			for _, what := range []string{"overdue range", "publishBy range", "expiry by id"} {
				require.Positive(t, seen[what], "no statement of the kind %q was captured: the check's queries changed, update the test", what)
			}
			// Count, the oldest and the listing in List; count and oldest
			// in RunOnce; the re-announcement's search.
			require.GreaterOrEqual(t, seen["overdue range"], 6)
		})
	}
}

// The fixture's proportions.
const (
	fixtureRows        = 20000
	overdueRows        = 30 // RESERVED or WORKING, past the grace, no publishBy
	overdueWorkingRows = 20 // of them WORKING, never announced: to re-announce
	expirableRows      = 10 // WORKING, past their publishBy, not claimed
	aheadRows          = 300
)

// loadPosts fills the posts table with fixtureRows posts, in batches of 500
// rows per INSERT, and updates the table's statistics: mostly PUBLISHED
// over the last 30 days, some CANCELLED and EXPIRED, aheadRows RESERVED or
// WORKING ahead of their time (a third of them with a publishBy), and the
// few that the check finds.
func loadPosts(t *testing.T, db *database.DB) {
	t.Helper()
	now := databasetest.Now(t, db.DB)
	posts := make([]reservation.Post, 0, fixtureRows)
	add := func(status reservation.Status, at time.Time, by *time.Time) {
		posts = append(posts, reservation.Post{Title: "t", Content: "c", Status: status, ScheduledAt: at, PublishBy: by,
			CreatedAt: now, UpdatedAt: now, Version: optimisticlock.Version{Int64: 1, Valid: true}})
	}
	for i := range overdueRows {
		st := reservation.StatusReserved
		if i < overdueWorkingRows {
			st = reservation.StatusWorking
		}
		add(st, now.Add(-time.Hour-time.Duration(i)*time.Minute), nil)
	}
	for i := range expirableRows {
		at := now.Add(-10 * time.Second)
		by := now.Add(-5*time.Second - time.Duration(i)*time.Millisecond)
		add(reservation.StatusWorking, at, &by)
	}
	for i := range aheadRows {
		st := reservation.StatusReserved
		if i%2 == 0 {
			st = reservation.StatusWorking
		}
		at := now.Add(time.Duration(i+1) * time.Minute)
		var by *time.Time
		if i%3 == 0 {
			b := at.Add(time.Hour)
			by = &b
		}
		add(st, at, by)
	}
	for i := 0; len(posts) < fixtureRows; i++ {
		st := reservation.StatusPublished
		switch {
		case i%50 == 0:
			st = reservation.StatusCancelled
		case i%100 == 1:
			st = reservation.StatusExpired
		}
		at := now.Add(-time.Duration(i) * 30 * 24 * time.Hour / fixtureRows)
		var by *time.Time
		if i%4 == 0 {
			b := at.Add(time.Hour)
			by = &b
		}
		add(st, at, by)
	}
	require.NoError(t, db.DB.CreateInBatches(posts, 500).Error)
	switch db.Dialect {
	case database.MySQL:
		rows, err := db.DB.Raw("ANALYZE TABLE posts").Rows()
		require.NoError(t, err)
		for rows.Next() {
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
	case database.PostgreSQL:
		require.NoError(t, db.DB.Exec("ANALYZE posts").Error)
	}
}

// capturedStatement is a statement the code ran on the posts table.
type capturedStatement struct {
	sql  string
	vars []any
}

var (
	byIDRe = regexp.MustCompile(`(?i)\bid IN \(`)
	// List's second read of its posts' statuses: by id, any index will do.
	stillOpenRe   = regexp.MustCompile("(?i)^SELECT [`\"]?id[`\"]? FROM [`\"]?posts[`\"]? WHERE id IN \\(.*\\) AND status IN \\([^)]*\\)$")
	publishByRe   = regexp.MustCompile(`(?i)\bpublish_by < `)
	scheduledAtRe = regexp.MustCompile(`(?i)\bscheduled_at < `)
)

// expectedIndex returns the index a statement of the check must read posts
// through and what kind of statement it is; "" for a statement that is not
// one of the check's searches (the database's clock, the lease).
// anyIndex stands for any index of posts: a read that must not scan the
// table, whichever index the planner takes.
const anyIndex = "*"

func expectedIndex(sql string) (index, what string) {
	switch {
	case stillOpenRe.MatchString(sql):
		return anyIndex, "statuses by id"
	case byIDRe.MatchString(sql):
		// By the primary key, or, as MariaDB sometimes estimates on a
		// table of a few dozen rows, by a status index whose range holds
		// two rows: an index either way, never a scan of posts.
		return anyIndex, "expiry by id"
	case publishByRe.MatchString(sql):
		return indexStatusPublishBy, "publishBy range"
	case scheduledAtRe.MatchString(sql):
		return indexStatusScheduledAt, "overdue range"
	}
	return "", ""
}

// explainPlan returns the plan of s, as EXPLAIN prints it: on MariaDB one
// line per table read (table, type, key, rows, Extra), on PostgreSQL the
// text plan.
func explainPlan(t *testing.T, db *database.DB, s capturedStatement) string {
	t.Helper()
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	rows, err := sqlDB.QueryContext(context.Background(), "EXPLAIN "+s.sql, s.vars...)
	require.NoError(t, err, "EXPLAIN %s", s.sql)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		if db.Dialect == database.PostgreSQL {
			out = append(out, fmt.Sprint(text(vals[0])))
			continue
		}
		var line []string
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "table", "type", "key", "rows", "extra":
				line = append(line, strings.ToLower(c)+"="+text(vals[i]))
			}
		}
		out = append(out, strings.Join(line, " "))
	}
	require.NoError(t, rows.Err())
	return strings.Join(out, "\n")
}

func text(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return string(v)
	default:
		return fmt.Sprint(v)
	}
}

// requireIndexScan requires the plan to read the posts table through index
// and never by a full scan.
func requireIndexScan(t *testing.T, d database.Dialect, plan, index, what, sql string) {
	t.Helper()
	switch d {
	case database.MySQL:
		var posts []string
		for line := range strings.SplitSeq(plan, "\n") {
			if strings.HasPrefix(line, "table=posts ") {
				posts = append(posts, line)
			}
		}
		require.NotEmpty(t, posts, "%s: the plan reads no posts table:\n%s\n%s", what, sql, plan)
		for _, line := range posts {
			require.NotContains(t, line, "type=ALL", "%s: a full scan of posts:\n%s\n%s", what, sql, plan)
			if index == anyIndex {
				require.NotContains(t, line, "key=NULL ", "%s: posts read through no index:\n%s\n%s", what, sql, plan)
				continue
			}
			require.Contains(t, line, "key="+index+" ", "%s: posts not read through %s:\n%s\n%s", what, index, sql, plan)
		}
	case database.PostgreSQL:
		require.NotRegexp(t, `Seq Scan on posts\b`, plan, "%s: a full scan of posts:\n%s\n%s", what, sql, plan)
		if index == anyIndex {
			require.Regexp(t, `(Index Scan|Index Only Scan|Bitmap Index Scan) (using|on) \w+`, plan, "%s: posts read through no index:\n%s\n%s", what, sql, plan)
			return
		}
		require.Regexp(t, `(Index Scan|Index Only Scan|Bitmap Index Scan) (using|on) `+index+`\b`, plan,
			"%s: posts not read through %s:\n%s\n%s", what, index, sql, plan)
	}
}
