// Package relaybench measures how fast outbox rows leave the database: this
// project's relay (Relay), the seed project's row-at-a-time relay
// (SeedStyle), and the database's own limit for claiming and acknowledging
// the same rows set-based in raw SQL with no broker (Raw). Each works on any
// dialect of database.Dialect and drains what Seed wrote; its benchmarks, the
// relay's and RabbitMQ's, and `posting bench` print them side by side, so that a figure is
// always read against the others of the same run on the same machine.
package relaybench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// EventsPerPost is how many events Seed writes for each post.
const EventsPerPost = 5

// seedStylePage is how many rows the seed project read per query.
const seedStylePage = 100

// instanceID is the claim owner the measurements write.
const instanceID = "relaybench"

// ErrStalled is returned when a drain stops moving rows before the backlog
// is gone (a sender that rejects them, say).
var ErrStalled = errors.New("relaybench: drain stalled")

// Result is one measurement: how many events moved and how long it took.
type Result struct {
	Events  int
	Elapsed time.Duration
}

// PerSecond is Events / Elapsed in seconds.
func (r Result) PerSecond() float64 { return Rate(r.Events, r.Elapsed) }

// Rate is n / elapsed in seconds, 0 for no time: the one rate every figure
// of the benches (events, posts) is given in.
func Rate(n int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(n) / elapsed.Seconds()
}

// Seed writes n PENDING outbox events (n/5 posts x 5 events each, so per-post order is exercised)
// into an empty, migrated database (any dialect of database.Dialect).
// The events are POSTING_EVENT rows interleaved round by round (every post's
// first event, then every post's second, ...), the way live traffic mixes
// posts, created a second ago so that they are due. On PostgreSQL the table
// is analyzed afterwards, as autovacuum would have done on a live table:
// without statistics the planner sorts the whole backlog on every claim.
func Seed(ctx context.Context, db *gorm.DB, n int) error {
	return SeedPosts(ctx, db, n, EventsPerPost)
}

// SeedPosts is Seed with perPost events for each post instead of
// EventsPerPost: with 1, every row is the head of its post, and relays
// sharing the backlog are not limited by per-post order.
func SeedPosts(ctx context.Context, db *gorm.DB, n, perPost int) error {
	if n <= 0 {
		return nil
	}
	perPost = max(perPost, 1)
	posts := (n + perPost - 1) / perPost
	at := time.Now().Add(-time.Second)
	rows := make([]*outbox.Message, 0, n)
	for round := 0; len(rows) < n; round++ {
		for p := 1; p <= posts && len(rows) < n; p++ {
			e, err := event.New(event.PostingEvent, int64(p), at, event.PostingEventFields{
				Action: event.ActionUpdated, Status: "RESERVED", ScheduledAt: at.Add(time.Hour),
			})
			if err != nil {
				return fmt.Errorf("relaybench seed: %w", err)
			}
			// A trace context, as every row a request or the scheduler
			// writes carries one (and the sender sends it as a header).
			ev := reservation.OutboxEvent(e, "")
			ev.Traceparent = fmt.Sprintf("00-%032x-%016x-00", p, round+1)
			m, err := outbox.NewMessage(ev)
			if err != nil {
				return fmt.Errorf("relaybench seed: %w", err)
			}
			rows = append(rows, m)
		}
	}
	if err := db.WithContext(ctx).CreateInBatches(rows, 1000).Error; err != nil {
		return fmt.Errorf("relaybench seed: %w", err)
	}
	if database.DialectOf(db) == database.PostgreSQL {
		if err := db.WithContext(ctx).Exec("ANALYZE outbox").Error; err != nil {
			return fmt.Errorf("relaybench seed: analyze: %w", err)
		}
	}
	return nil
}

// Raw claims and acknowledges every PENDING outbox row set-based in raw SQL, batch rows per
// statement pair (claim UPDATE ... then SENT UPDATE by id), no broker: the database's limit.
// Each batch reads the ids of the oldest PENDING rows from the claim index
// (no payload), claims them with one UPDATE and marks them SENT with
// another, each statement its own commit, as a relay that writes the claim
// before a send and the acknowledgement after it must. It keeps no per-post
// order (it claims rows whose predecessors are still in flight, which no
// relay may do) and sends nothing: an upper bound, not a design.
func Raw(ctx context.Context, db *gorm.DB, batch int) (Result, error) {
	if batch <= 0 {
		return Result{}, fmt.Errorf("relaybench raw: batch %d", batch)
	}
	db = db.WithContext(ctx)
	var res Result
	start := time.Now()
	for {
		var ids []int64
		if err := db.Raw("SELECT id FROM outbox WHERE status = ? ORDER BY created, id LIMIT ?",
			outbox.StatusPending, batch).Scan(&ids).Error; err != nil {
			return res, fmt.Errorf("relaybench raw: read: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		now := time.Now().UTC()
		claim := db.Exec("UPDATE outbox SET status = ?, version = version + 1, claimed_by = ?, claimed_at = ? "+
			"WHERE id IN ? AND status = ?", outbox.StatusProcessing, instanceID, now, ids, outbox.StatusPending)
		if claim.Error != nil {
			return res, fmt.Errorf("relaybench raw: claim: %w", claim.Error)
		}
		ack := db.Exec("UPDATE outbox SET status = ?, version = version + 1, sent_at = ? WHERE id IN ? AND status = ?",
			outbox.StatusSent, now, ids, outbox.StatusProcessing)
		if ack.Error != nil {
			return res, fmt.Errorf("relaybench raw: ack: %w", ack.Error)
		}
		res.Events += int(ack.RowsAffected)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// SeedStyle moves every PENDING row the way the seed project did: 100 rows read per query, then one
// row at a time claimed (version check), sent through send, and saved SENT.
// A row the sender does not acknowledge is put back to RETRY and not counted;
// one that another claimer took meanwhile is skipped.
func SeedStyle(ctx context.Context, db *gorm.DB, send relay.Sender) (Result, error) {
	db = db.WithContext(ctx)
	var res Result
	start := time.Now()
	for {
		var page []outbox.Message
		if err := db.Where("status = ?", outbox.StatusPending).Order("created, id").Limit(seedStylePage).
			Find(&page).Error; err != nil {
			return res, fmt.Errorf("relaybench seed style: read: %w", err)
		}
		if len(page) == 0 {
			break
		}
		moved := 0
		for _, m := range page {
			now := time.Now().UTC()
			claim := db.Model(&outbox.Message{}).Where("id = ? AND version = ?", m.ID, m.Version).
				Updates(map[string]any{"status": outbox.StatusProcessing, "version": m.Version + 1,
					"claimed_by": instanceID, "claimed_at": now})
			if claim.Error != nil {
				return res, fmt.Errorf("relaybench seed style: claim: %w", claim.Error)
			}
			if claim.RowsAffected == 0 {
				continue
			}
			m.Version++
			m.Status = outbox.StatusProcessing
			errs := send.Send(ctx, []event.Message{relay.Envelope(m)})
			status := outbox.StatusSent
			if len(errs) != 1 || errs[0] != nil {
				status = outbox.StatusRetry
			}
			save := db.Model(&outbox.Message{}).Where("id = ? AND version = ?", m.ID, m.Version).
				Updates(map[string]any{"status": status, "version": m.Version + 1, "sent_at": time.Now().UTC()})
			if save.Error != nil {
				return res, fmt.Errorf("relaybench seed style: save: %w", save.Error)
			}
			if status == outbox.StatusSent && save.RowsAffected == 1 {
				res.Events++
				moved++
			}
		}
		if moved == 0 {
			res.Elapsed = time.Since(start)
			return res, fmt.Errorf("%w: seed style moved none of %d rows read", ErrStalled, len(page))
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// Relay drains every PENDING row with this project's relay.Relay at the
// given fixed batch size (the batch does not grow: MaxBatchSize is batch).
// It drives the relay's polls itself the way the relay's loop does while
// full batches come (Pump back to back: the next batch is claimed while the
// current one is sent, then Flush), with the contract's other defaults, and
// counts the rows recorded SENT. It stops when a poll claims and moves
// nothing.
func Relay(ctx context.Context, db *gorm.DB, send relay.Sender, batch int) (Result, error) {
	return drain(ctx, db, send, batch, batch, (*relay.Relay).Pump)
}

// Default is Relay with the relay's default batch, which starts at
// relay.DefaultConfig's BatchSize and grows while polls come back full, up
// to relay.DefaultMaxBatchSize.
func Default(ctx context.Context, db *gorm.DB, send relay.Sender) (Result, error) {
	d := relay.DefaultConfig()
	return drain(ctx, db, send, d.BatchSize, d.MaxBatchSize, (*relay.Relay).Pump)
}

// Sequential is Relay with the poll before pipelining (RunOnce: claim,
// send, record, then the next claim), for comparison.
func Sequential(ctx context.Context, db *gorm.DB, send relay.Sender, batch int) (Result, error) {
	return drain(ctx, db, send, batch, batch, (*relay.Relay).RunOnce)
}

// drain runs poll back to back until a poll claims and moves nothing, then
// flushes.
func drain(ctx context.Context, db *gorm.DB, send relay.Sender, batch, maxBatch int,
	poll func(*relay.Relay, context.Context) (relay.Result, error)) (Result, error) {
	store := outbox.NewStore(&database.DB{DB: db, Dialect: database.DialectOf(db)})
	r, err := relay.New(store, send, relay.Config{InstanceID: instanceID, BatchSize: batch, MaxBatchSize: maxBatch,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return Result{}, fmt.Errorf("relaybench relay: %w", err)
	}
	var res Result
	start := time.Now()
	for {
		p, err := poll(r, ctx)
		res.Events += p.Sent
		if err != nil {
			return res, fmt.Errorf("relaybench relay: %w", err)
		}
		moved := p.Sent + p.Deferred
		if p.Claimed == 0 && moved == 0 {
			break
		}
		if moved == 0 && p.Retried+p.Failed > 0 {
			res.Elapsed = time.Since(start)
			return res, fmt.Errorf("%w: the sender acknowledged none of a batch", ErrStalled)
		}
	}
	f, err := r.Flush(ctx)
	res.Events += f.Sent
	res.Elapsed = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("relaybench relay: %w", err)
	}
	return res, nil
}
