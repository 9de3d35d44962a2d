package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
)

// ErrNotDrained is returned by RelayInstances when the relays stopped with
// rows of the backlog not SENT.
var ErrNotDrained = errors.New("relays left the backlog unsent")

// idlePause is how long a relay that found nothing to claim waits before
// it looks again: the heads it waits for are acknowledged within a batch's
// round trip, and an empty claim scans every blocked row of the backlog, so
// looking more often only loads the database (the service's loop waits its
// whole interval, 5 s, unless a commit wakes it).
const idlePause = 50 * time.Millisecond

// unsent are the statuses of rows still to send or in flight.
var unsent = []outbox.Status{outbox.StatusPending, outbox.StatusRetry, outbox.StatusProcessing}

// RelayInstances drains the outbox's backlog with one relay per sender at
// their default settings (relay.DefaultConfig: batch 100 growing to 1000),
// each under its own instance id, all at the same time on the one database,
// as that many `serve` processes would. Each polls back to back while its
// polls claim or move rows, as the single drains of `posting bench` do; one
// that found nothing to claim (every head in flight with the others) looks
// again after idlePause. It returns the events the relays recorded SENT and
// the time until a relay found no row PENDING, RETRY or PROCESSING left. It
// fails with ErrNotDrained if such rows are left when they stopped.
func RelayInstances(ctx context.Context, db *database.DB, senders []relay.Sender) (Throughput, error) {
	instances := len(senders)
	if instances < 1 {
		return Throughput{}, errors.New("relay instances: no sender")
	}
	store := outbox.NewStore(db)
	relays := make([]*relay.Relay, instances)
	for i := range relays {
		r, err := relay.New(store, senders[i], relay.Config{InstanceID: "bench-relay-" + strconv.Itoa(i+1),
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return Throughput{}, fmt.Errorf("relay instances: %w", err)
		}
		relays[i] = r
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		sent      int
		errs      []error
		drainedAt time.Time
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	drained, markDrained := context.WithCancel(ctx)
	defer markDrained()
	start := time.Now()
	for _, r := range relays {
		wg.Go(func() {
			n, err := drainShared(ctx, drained, db, r, func() {
				mu.Lock()
				if drainedAt.IsZero() {
					drainedAt = time.Now()
				}
				mu.Unlock()
				markDrained()
			})
			mu.Lock()
			defer mu.Unlock()
			sent += n
			if err != nil {
				errs = append(errs, err)
				cancel() // the others would wait for its rows
			}
		})
	}
	wg.Wait()
	if drainedAt.IsZero() {
		drainedAt = time.Now()
	}
	res := Throughput{Count: sent, Elapsed: drainedAt.Sub(start)}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("relay instances: %w", err)
	}
	var left int64
	if err := db.WithContext(ctx).Model(&outbox.Message{}).Where("status IN ?", unsent).Count(&left).Error; err != nil {
		return res, fmt.Errorf("relay instances: count unsent rows: %w", err)
	}
	if left > 0 {
		return res, fmt.Errorf("%w: %d rows after %d relays stopped", ErrNotDrained, left, instances)
	}
	return res, nil
}

// drainShared polls r until the outbox holds no
// row to send or in flight (then it calls markDrained) or another relay
// found so (drained ends), then flushes, and returns the rows r recorded
// SENT.
func drainShared(ctx, drained context.Context, db *database.DB, r *relay.Relay, markDrained func()) (int, error) {
	sent := 0
	for drained.Err() == nil {
		p, err := r.Pump(ctx)
		sent += p.Sent
		if err != nil {
			return sent, err
		}
		if p.Claimed > 0 || p.Sent+p.Deferred > 0 {
			continue
		}
		var busy []int64
		if err := db.WithContext(ctx).Model(&outbox.Message{}).Where("status IN ?", unsent).
			Limit(1).Pluck("id", &busy).Error; err != nil {
			return sent, fmt.Errorf("look for rows to send: %w", err)
		}
		if len(busy) == 0 {
			markDrained()
			break
		}
		if !backoff.Sleep(drained, idlePause) && ctx.Err() != nil {
			return sent, ctx.Err()
		}
	}
	f, err := r.Flush(ctx)
	return sent + f.Sent, err
}
