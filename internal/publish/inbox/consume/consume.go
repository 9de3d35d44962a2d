// Package consume is the part of a broker consumer that does not know its
// broker: it decodes the messages a consumer fetched together (inbox.Decode),
// hands them to an inbox.Handler (in one call of an inbox.BatchHandler, or
// one at a time), retries a failing event without moving past it, skips
// malformed messages (logged and counted), and only then has the transport
// settle them (commit offsets, acknowledge, dead-letter).
//
// A broker package (kafka, rabbitmq) fetches a batch of one partition (or
// queue), in order, with Collect, and settles it through a Settler; when
// Handle reports the batch unsettled, the transport leaves the rest of it
// unacknowledged, so that the broker delivers it again.
package consume

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/publish/inbox"
)

// Message is one fetched message, as the transport read it.
type Message struct {
	// Key, Headers and Value are what inbox.Decode checks.
	Key     []byte
	Headers map[string]string
	Value   []byte
	// Topic, Partition and Offset are written into the decoded event (its
	// coordinates: where a redelivery would come from).
	Topic     string
	Partition int32
	Offset    int64
	// Where names the message in logs (its transport's coordinates, as
	// slog key-value pairs); the event's id, type and post are added once
	// it is decoded.
	Where []any
}

// Settler is the transport's part of a batch: what it does with a message
// once the loop has settled it. The loop calls it only after the work of the
// message (and of the messages before it) is durable.
type Settler interface {
	// Ack says that msgs[i] and every earlier message of the batch not
	// settled yet (malformed ones excepted, which got Skip first) are
	// handled: their offsets may be committed, they may be acknowledged.
	Ack(i int) error
	// Skip says that msgs[i] is malformed and was skipped: it must not be
	// delivered again (committed past, or dead-lettered).
	Skip(i int) error
}

// Config configures a Loop.
type Config struct {
	// Handler receives the events. Required.
	Handler inbox.Handler
	// RetryBase is the pause before handling an event again after the
	// handler failed, doubled per failure up to RetryMax (not jittered:
	// the partition waits on it). Required, more than 0.
	RetryBase time.Duration
	// RetryMax caps those pauses. At least RetryBase.
	RetryMax time.Duration
	// Observe, if set, is told of events the loop itself settles:
	// "malformed" (skipped) and "error" (the handler failed; tried again).
	// eventType is the header's value, "" when missing.
	Observe func(eventType, outcome string)
	// Logger receives the loop's warnings and errors. Default: discarded.
	Logger *slog.Logger
	// Skipped is the message logged for a malformed message: what its
	// transport does with it. Default "malformed message skipped".
	Skipped string
	// SkippedAttrs are added to that log line (after the message's Where).
	SkippedAttrs []any
}

// The defaults of a consumer's RetryBase and RetryMax settings (each broker
// package's ConsumerConfig has both, and hands them to Config).
const (
	DefaultRetryBase = 100 * time.Millisecond
	DefaultRetryMax  = 5 * time.Second
)

// RetryLimits returns the limits of a consumer's RetryBase and RetryMax
// settings, for config.CheckDurations: RetryBase 1ms to 1m, RetryMax
// RetryBase to 10m. Every broker's consumer checks them alike, since they
// mean the same: how this loop waits for a failing handler.
func RetryLimits(base, max time.Duration) []config.Duration {
	return []config.Duration{
		{Name: "RetryBase", Value: base, Min: time.Millisecond, Max: time.Minute},
		{Name: "RetryMax", Value: max, Min: base, Max: 10 * time.Minute},
	}
}

// Loop settles the batches of one consumer; it holds no state between
// calls, so one Loop may serve several partitions at once.
type Loop struct {
	cfg Config
	log *slog.Logger
}

// New returns a Loop for cfg; a Config without Handler or with a RetryBase
// not above 0 is a programming error of the transport, which checked its
// own settings first.
func New(cfg Config) *Loop {
	if cfg.Handler == nil || cfg.RetryBase <= 0 {
		panic("consume: a Loop needs a handler and a positive retry base")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Skipped == "" {
		cfg.Skipped = "malformed message skipped"
	}
	return &Loop{cfg: cfg, log: cfg.Logger}
}

// Collect returns first and the messages already waiting on ch, up to
// inbox.MaxBatch in all: the batch a transport hands to Handle. It does not
// wait; a closed ch ends the batch (the transport's next receive sees it).
func Collect[T any](first T, ch <-chan T) []T {
	batch := append(make([]T, 0, 16), first)
	for len(batch) < inbox.MaxBatch {
		select {
		case m, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, m)
		default:
			return batch
		}
	}
	return batch
}

// Handle settles msgs, fetched together from one partition (or queue), in
// order: in one call of an inbox.BatchHandler when the handler is one (one
// transaction), then the malformed ones skipped and the rest acknowledged;
// when that call fails, the messages are handled one at a time, each
// retried until it is settled. It reports false when ctx ended first (what
// was not acknowledged is delivered again), and the first error of s.
func (l *Loop) Handle(ctx context.Context, msgs []Message, s Settler) (bool, error) {
	bh, ok := l.cfg.Handler.(inbox.BatchHandler)
	if !ok || len(msgs) == 1 {
		return l.handleEach(ctx, msgs, s)
	}
	decoded := make([]decoded, len(msgs))
	var evs []inbox.Event
	var good []int // the index in msgs of each of evs
	for i, m := range msgs {
		decoded[i] = decode(m)
		if decoded[i].err == nil {
			evs, good = append(evs, decoded[i].ev), append(good, i)
		}
	}
	if len(evs) > 0 {
		malformed, err := bh.HandleBatch(ctx, evs)
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			l.log.Warn("batch handling failed; handling its events one at a time", "messages", len(msgs),
				slog.Group("first", msgs[0].Where...), slog.Group("last", msgs[len(msgs)-1].Where...), "err", err)
			return l.handleEach(ctx, msgs, s)
		}
		for j, merr := range malformed {
			if merr != nil {
				decoded[good[j]].err = merr
			}
		}
	}
	// Skip first: acknowledging the last handled message may settle the
	// ones before it too.
	last := -1
	for i, d := range decoded {
		if d.err == nil {
			last = i
			continue
		}
		if err := l.skip(d, s, i); err != nil {
			return false, err
		}
	}
	if last >= 0 {
		if err := s.Ack(last); err != nil {
			return false, err
		}
	}
	return true, nil
}

// handleEach settles msgs one at a time, in order.
func (l *Loop) handleEach(ctx context.Context, msgs []Message, s Settler) (bool, error) {
	for i, m := range msgs {
		settled, err := l.handle(ctx, m, s, i)
		if err != nil || !settled {
			return settled, err
		}
	}
	return true, nil
}

// handle hands msgs[i] (m) to the handler until it is settled: handled and
// acknowledged, or skipped as malformed.
func (l *Loop) handle(ctx context.Context, m Message, s Settler, i int) (bool, error) {
	d := decode(m)
	retry := backoff.Backoff{Base: l.cfg.RetryBase, Max: l.cfg.RetryMax, Exact: true}
	for d.err == nil {
		err := l.cfg.Handler.Handle(ctx, d.ev)
		switch {
		case err == nil:
			return true, s.Ack(i)
		case errors.Is(err, inbox.ErrMalformed):
			d.err = err
			continue
		case ctx.Err() != nil:
			return false, nil
		}
		l.observe(string(d.ev.Type), "error")
		pause := retry.Next()
		l.log.Warn("event handling failed; trying again", append(d.where, "err", err, "pause", pause)...)
		if !backoff.Sleep(ctx, pause) {
			return false, nil
		}
	}
	return true, l.skip(d, s, i)
}

// skip logs and counts a malformed message, and has the transport skip it.
func (l *Loop) skip(d decoded, s Settler, i int) error {
	l.observe(d.headers[event.HeaderEventType], "malformed")
	attrs := append(append(d.where, l.cfg.SkippedAttrs...), "err", d.err)
	l.log.Error(l.cfg.Skipped, attrs...)
	return s.Skip(i)
}

func (l *Loop) observe(eventType, outcome string) {
	if l.cfg.Observe != nil {
		l.cfg.Observe(eventType, outcome)
	}
}

// decoded is a message decoded for the handler: its event (when err is
// nil), its headers and its coordinates for logs.
type decoded struct {
	ev      inbox.Event
	headers map[string]string
	where   []any
	err     error
}

func decode(m Message) decoded {
	where := append([]any(nil), m.Where...) // the caller's stays as it was
	ev, err := inbox.Decode(m.Key, m.Headers, m.Value)
	if err == nil {
		ev.Topic, ev.Partition, ev.Offset = m.Topic, m.Partition, m.Offset
		where = append(where, "event_id", ev.EventID, "event_type", ev.Type, "post_id", ev.PostID)
	}
	return decoded{ev: ev, headers: m.Headers, where: where, err: err}
}
