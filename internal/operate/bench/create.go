package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/postingsvc/posting/internal/operate/bench/relaybench"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Throughput is how many operations completed in how long.
type Throughput struct {
	Count   int
	Elapsed time.Duration
}

// PerSecond is Count / Elapsed in seconds, 0 for no time.
func (t Throughput) PerSecond() float64 { return relaybench.Rate(t.Count, t.Elapsed) }

// Add sums two measurements.
func (t Throughput) Add(u Throughput) Throughput {
	return Throughput{Count: t.Count + u.Count, Elapsed: t.Elapsed + u.Elapsed}
}

// The post every create of the bench writes, through the API or in raw SQL:
// the same sizes both ways.
const (
	postTitle   = "bench post"
	postContent = "A post written by posting bench, about as long as a short announcement: " +
		"it has a title, a few sentences of content and a time in the future at which it goes out."
)

// scheduledAhead is how far ahead the bench's posts are scheduled: beyond
// the default reservation lead, so the scheduler leaves them alone while the
// bench runs.
const scheduledAhead = 24 * time.Hour

// runClients runs fn in a loop on clients goroutines until d has passed,
// and counts the calls that returned nil. The first error stops every
// client and is returned.
func runClients(ctx context.Context, clients int, d time.Duration, fn func(ctx context.Context) error) (Throughput, error) {
	if clients < 1 {
		return Throughput{}, fmt.Errorf("clients must be at least 1, got %d", clients)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		done atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for range clients {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := fn(ctx); err != nil {
					cancel(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return Throughput{}, err
	}
	return Throughput{Count: int(done.Load()), Elapsed: elapsed}, nil
}

// RawCreate writes, on clients connections at once for d, what a create
// through the API commits: one posts row and its POSTING_EVENT outbox row in
// one transaction, in plain SQL through database/sql, without GORM, JSON
// decoding, validation or HTTP. It is the database's limit for creates on
// this machine, the yardstick of the API's rate.
func RawCreate(ctx context.Context, db *database.DB, clients int, d time.Duration) (Throughput, error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return Throughput{}, err
	}
	insertPost := "INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at, version) VALUES (?, ?, 'RESERVED', ?, ?, ?, 1)"
	insertOutbox := "INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, retry_count, version, next_attempt_at) " +
		"VALUES (?, 'POSTING_EVENT', ?, ?, ?, 'PENDING', 0, 1, ?)"
	if db.Dialect == database.PostgreSQL {
		insertPost = dollarPlaceholders(insertPost) + " RETURNING id"
		insertOutbox = dollarPlaceholders(insertOutbox)
	}
	return runClients(ctx, clients, d, func(ctx context.Context) error {
		now := database.Normalize(time.Now())
		at := now.Add(scheduledAhead)
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("raw create: begin: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		var id int64
		if db.Dialect == database.PostgreSQL {
			err = tx.QueryRowContext(ctx, insertPost, postTitle, postContent, at, now, now).Scan(&id)
		} else {
			var res sql.Result
			if res, err = tx.ExecContext(ctx, insertPost, postTitle, postContent, at, now, now); err == nil {
				id, err = res.LastInsertId()
			}
		}
		if err != nil {
			return fmt.Errorf("raw create: insert post: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertOutbox, eventID.String(), id, createdPayload(eventID.String(), id, now, at), now, now); err != nil {
			return fmt.Errorf("raw create: insert outbox row: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("raw create: commit: %w", err)
		}
		return nil
	})
}

// createdPayload is a CREATED event's value, as the service writes it.
func createdPayload(eventID string, postID int64, now, at time.Time) string {
	return `{"action":"CREATED","eventId":"` + eventID + `","eventType":"POSTING_EVENT","occurredAt":"` +
		now.Format(time.RFC3339Nano) + `","postId":` + strconv.FormatInt(postID, 10) + `,"scheduledAt":"` +
		at.Format(time.RFC3339Nano) + `","status":"RESERVED"}`
}

// dollarPlaceholders turns ? placeholders into PostgreSQL's $1, $2, ...
func dollarPlaceholders(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
