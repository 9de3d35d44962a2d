package worker

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Handle processes one event effectively once: the inbox row and the
// event's effect on the publications table commit together, so a
// redelivered event changes nothing in the database. A reservation
// schedules the post's publication at the post's scheduledAt (as the posts
// table holds it) and arms its timer; a CANCELLED or EXPIRED posting event
// settles a pending publication so and disarms it. Every other posting
// event (CREATED, UPDATED, an action the worker does not know; inbox.Decode
// refuses an unknown type as malformed) has no effect on publications: it is ignored, without a database statement
// (OutcomeIgnored), so it writes no inbox row and leaves its post's
// sequence as it was. An event the database contradicts is refused, as
// HandleBatch says: nothing is recorded and Handle returns nil.
//
// The handling is a span "process <event type>", a child of the trace
// context the event arrived with (its traceparent header).
func (w *Worker) Handle(ctx context.Context, ev inbox.Event) error {
	ctx, span := w.tracer().Start(telemetry.WithTraceparent(ctx, ev.Traceparent), "process "+string(ev.Type),
		trace.WithSpanKind(trace.SpanKindConsumer))
	err := w.handle(ctx, ev)
	endSpan(span, ev, err)
	return err
}

// plan is what an event asks of the worker: a publication to schedule (a
// reservation), or a pending one to settle (end: CANCELLED or EXPIRED, for a
// posting event of that action once the posts table agrees, see
// tableView.apply), or nothing (ignored).
type plan struct {
	pub    *Publication
	action event.Action // a posting event's
	end    PublicationStatus
}

// ignored says that the event asks nothing of the worker: neither a
// reservation nor a CANCELLED or EXPIRED posting event. Recording it would
// change nothing a later event does: the order check only compares the
// sequences of events that act, and an ignored redelivery acts no more
// than the first delivery did.
func (p plan) ignored() bool {
	return p.pub == nil && p.action != event.ActionCancelled && p.action != event.ActionExpired
}

// stamp sets the times of p's publication, now by the database's clock.
func (p plan) stamp(now time.Time) {
	if p.pub != nil {
		p.pub.CreatedAt, p.pub.UpdatedAt = now, now
	}
}

// planFor reads what ev asks for; an error wraps inbox.ErrMalformed. The
// publication continues ctx's trace; its times are set by stamp.
func planFor(ctx context.Context, ev inbox.Event) (plan, error) {
	switch ev.Type {
	case event.ReservationEvent:
		var f event.ReservationEventFields
		if err := ev.Fields(&f); err != nil {
			return plan{}, err
		}
		if f.ScheduledAt.IsZero() {
			return plan{}, fmt.Errorf("%w: reservation event %s has no scheduledAt", inbox.ErrMalformed, ev.EventID)
		}
		// Years 1..9999 in UTC are what every database (and the MySQL
		// driver) can store; anything else would fail the write on every
		// try and stall the partition or queue behind it.
		if y := f.ScheduledAt.UTC().Year(); y < 1 || y > 9999 {
			return plan{}, fmt.Errorf("%w: reservation event %s has scheduledAt %s, outside years 1 to 9999 UTC",
				inbox.ErrMalformed, ev.EventID, f.ScheduledAt.Format(time.RFC3339))
		}
		pub := &Publication{PostID: ev.PostID, EventID: ev.EventID, PartitionID: ev.Partition,
			ScheduledAt: database.Normalize(f.ScheduledAt), Status: PublicationPending}
		if tp := telemetry.Traceparent(ctx); tp != "" {
			pub.Traceparent = &tp // the publication continues this trace, even after a restart
		}
		return plan{pub: pub}, nil
	case event.PostingEvent:
		var f event.PostingEventFields
		if err := ev.Fields(&f); err != nil {
			return plan{}, err
		}
		return plan{action: f.Action}, nil
	}
	return plan{}, nil
}

func (w *Worker) handle(ctx context.Context, ev inbox.Event) error {
	p, err := planFor(ctx, ev)
	if err != nil {
		return err
	}
	if p.ignored() {
		w.ignore(ev, trace.SpanFromContext(ctx))()
		return nil
	}
	// The inbox and publication times are compared with the database's
	// clock by others (the cleaner's retention cutoff), so they are its.
	now, err := w.dbNow(ctx)
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
	p.stamp(now)
	view, err := w.readTable(ctx, []inbox.Event{ev})
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
	if reason := view.refusal(ev, p); reason != "" {
		w.refuse(ev, reason, trace.SpanFromContext(ctx))()
		return nil
	}
	view.apply(ev, &p)
	var ended bool // the effect settled a pending publication
	outcomeIn, err := inbox.Process(ctx, w.db, w.cfg.Consumer, ev, now, func(tx *gorm.DB) error {
		var err error
		switch {
		case p.pub != nil:
			err = createPublications(tx, []Publication{*p.pub})
		case p.end != "":
			ended, err = settle(tx, ev.PostID, p.end, now, nil)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
	w.handled(ev, p, outcomeIn, ended)
	return nil
}

// handled does what follows an event's commit: timers, and the observers;
// ended says that the event settled a pending publication (as p.end).
func (w *Worker) handled(ev inbox.Event, p plan, outcomeIn inbox.Outcome, ended bool) {
	outcome := OutcomeProcessed
	switch outcomeIn {
	case inbox.Duplicate:
		outcome = OutcomeDuplicate
	case inbox.OutOfOrder:
		// A later event of the post was applied already: this one is
		// older news, dropped (its effect would undo a newer state).
		if w.cfg.ObserveConsumed != nil {
			w.cfg.ObserveConsumed(string(ev.Type), OutcomeOutOfOrder)
		}
		return
	}
	// Also after a duplicate: the first delivery's commit may have
	// succeeded with its answer lost, leaving no timer. Arming is a no-op
	// for an armed post, and PublishDue reads the publication's state.
	switch {
	case p.pub != nil:
		w.arm(*p.pub, false)
	case p.end != "":
		w.disarm(ev.PostID)
	}
	if ended {
		w.observeSettled(p.end)
	}
	if w.cfg.ObserveConsumed != nil {
		w.cfg.ObserveConsumed(string(ev.Type), outcome)
	}
}

// createPublications writes pubs PENDING. A post has one reservation event
// (its dedup key), so a row for the post is this event's, written before.
func createPublications(tx *gorm.DB, pubs []Publication) error {
	if len(pubs) == 0 {
		return nil
	}
	if err := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&pubs).Error; err != nil {
		return fmt.Errorf("schedule %d publications: %w", len(pubs), err)
	}
	return nil
}

// HandleBatch processes evs (events of one partition, in order) in one
// transaction (inbox.ProcessBatch): the inbox rows, the publications of the
// reservations (one insert for a run of them) and the settlements of
// CANCELLED and EXPIRED posting events, in the events' order. Malformed
// events are skipped and reported in malformed; timers are armed, and
// observers told, after the commit. Each event has its span "process <event
// type>", as with Handle.
//
// The worker acts on each post as its database holds it, read before the
// transaction in two statements for the whole batch (tableView): a
// reservation is scheduled at the post's scheduled_at, and a CANCELLED or
// EXPIRED event settles a publication only for a post the table says is
// CANCELLED or EXPIRED. An event the database contradicts is refused
// (tableView.refusal: its post unknown, its sequence never written, or a
// status the table denies): it writes nothing, not even its inbox row or
// its post's sequence, so it can neither block nor change the post's real
// events; it is counted (ObserveRefused), logged once per post, and not
// malformed, so its offset is committed (acknowledged) with the batch.
// Ignored and refused events are counted only when HandleBatch returns nil:
// after an error the consumer hands the events over again (one at a time),
// and they are counted then.
func (w *Worker) HandleBatch(ctx context.Context, evs []inbox.Event) (malformed []error, err error) {
	var counts []func() // of the ignored and refused events, made once the batch is settled
	defer func() {
		if err == nil {
			for _, count := range counts {
				count()
			}
		}
	}()
	malformed = make([]error, len(evs))
	plans := make([]plan, 0, len(evs))
	good := make([]inbox.Event, 0, len(evs))
	spans := make([]trace.Span, 0, len(evs))
	for i, ev := range evs {
		sctx, span := w.tracer().Start(telemetry.WithTraceparent(ctx, ev.Traceparent), "process "+string(ev.Type),
			trace.WithSpanKind(trace.SpanKindConsumer))
		p, err := planFor(sctx, ev)
		switch {
		case err != nil:
			malformed[i] = err
			endSpan(span, ev, err)
		case p.ignored():
			counts = append(counts, w.ignore(ev, span))
			endSpan(span, ev, nil)
		default:
			plans, good, spans = append(plans, p), append(good, ev), append(spans, span)
		}
	}
	if len(good) == 0 {
		return malformed, nil
	}
	now, err := w.dbNow(ctx)
	if err != nil {
		for i, span := range spans {
			endSpan(span, good[i], err)
		}
		return malformed, fmt.Errorf("process %d events: %w", len(good), err)
	}
	for _, p := range plans {
		p.stamp(now)
	}
	view, err := w.readTable(ctx, good)
	if err != nil {
		for i, span := range spans {
			endSpan(span, good[i], err)
		}
		return malformed, fmt.Errorf("process %d events: %w", len(good), err)
	}
	taken := 0
	for i, ev := range good {
		if reason := view.refusal(ev, plans[i]); reason != "" {
			counts = append(counts, w.refuse(ev, reason, spans[i]))
			endSpan(spans[i], ev, nil)
			continue
		}
		view.apply(ev, &plans[i])
		good[taken], plans[taken], spans[taken] = ev, plans[i], spans[i]
		taken++
	}
	good, plans, spans = good[:taken], plans[:taken], spans[:taken]
	var ended map[int64]bool // posts whose pending publication this batch settled
	var outcomes []inbox.Outcome
	if len(good) > 0 {
		outcomes, err = inbox.ProcessBatch(ctx, w.db, w.cfg.Consumer, good, now, func(tx *gorm.DB, apply []int) error {
			ended = map[int64]bool{}
			var run []Publication // reservations since the last settlement
			for _, i := range apply {
				p := plans[i]
				switch {
				case p.pub != nil:
					run = append(run, *p.pub)
				case p.end != "":
					if err := createPublications(tx, run); err != nil {
						return err
					}
					run = run[:0]
					ok, err := settle(tx, good[i].PostID, p.end, now, nil)
					if err != nil {
						return err
					}
					ended[good[i].PostID] = ended[good[i].PostID] || ok
				}
			}
			return createPublications(tx, run)
		})
	}
	for i, span := range spans {
		endSpan(span, good[i], err)
	}
	if err != nil {
		return malformed, fmt.Errorf("process %d events: %w", len(good), err)
	}
	for i, ev := range good {
		w.handled(ev, plans[i], outcomes[i], plans[i].end != "" && ended[ev.PostID])
		if plans[i].end != "" {
			delete(ended, ev.PostID) // observed once
		}
	}
	return malformed, nil
}

// endSpan ends the span of handling ev, with err.
func endSpan(span trace.Span, ev inbox.Event, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.message.id", ev.EventID), attribute.Int64("posting.post_id", ev.PostID),
			attribute.String("messaging.destination.name", ev.Topic), attribute.Int64("messaging.kafka.offset", ev.Offset))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// The consumers hand a fetched batch to HandleBatch.
var _ inbox.BatchHandler = (*Worker)(nil)
