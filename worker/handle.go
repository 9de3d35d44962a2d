package worker

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/telemetry"
)

// Handle processes one event effectively once: the inbox row and the
// event's effect on the publications table commit together, so a
// redelivered event changes nothing in the database. A reservation schedules the post's
// publication and arms its timer; a CANCELLED posting event settles a
// pending publication as CANCELLED and disarms it; other posting events
// are only recorded.
//
// The handling is a span "process <event type>", a child of the trace
// context the event arrived with (its traceparent header).
func (w *Worker) Handle(ctx context.Context, ev inbox.Event) error {
	ctx, span := w.tracer().Start(telemetry.WithTraceparent(ctx, ev.Traceparent), "process "+string(ev.Type),
		trace.WithSpanKind(trace.SpanKindConsumer))
	err := w.handle(ctx, ev)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.message.id", ev.EventID), attribute.Int64("posting.post_id", ev.PostID),
			attribute.String("messaging.destination.name", ev.Topic), attribute.Int64("messaging.kafka.offset", ev.Offset))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	return err
}

func (w *Worker) handle(ctx context.Context, ev inbox.Event) error {
	// The inbox and publication times are compared with the database's
	// clock by others (the cleaner's retention cutoff), so they are its.
	now, err := w.dbNow(ctx)
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
	var (
		effect    func(tx *gorm.DB) error
		after     func()
		cancelled bool // the effect settled a pending publication CANCELLED
	)
	switch ev.Type {
	case event.ReservationEvent:
		var f event.ReservationEventFields
		if err := ev.Fields(&f); err != nil {
			return err
		}
		if f.ScheduledAt.IsZero() {
			return fmt.Errorf("%w: reservation event %s has no scheduledAt", inbox.ErrMalformed, ev.EventID)
		}
		pub := Publication{PostID: ev.PostID, EventID: ev.EventID, PartitionID: ev.Partition,
			ScheduledAt: database.Normalize(f.ScheduledAt), Status: PublicationPending, CreatedAt: now, UpdatedAt: now}
		if tp := telemetry.Traceparent(ctx); tp != "" {
			pub.Traceparent = &tp // the publication continues this trace, even after a restart
		}
		effect = func(tx *gorm.DB) error {
			// A post has one reservation event (its dedup key), so a row for
			// the post is this event's, written before.
			return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&pub).Error
		}
		after = func() { w.arm(pub, false) }
	case event.PostingEvent:
		var f event.PostingEventFields
		if err := ev.Fields(&f); err != nil {
			return err
		}
		if f.Action != event.ActionCancelled {
			break
		}
		effect = func(tx *gorm.DB) error {
			var err error
			cancelled, err = settle(tx, ev.PostID, PublicationCancelled, now, nil)
			return err
		}
		after = func() { w.disarm(ev.PostID) }
	}
	outcomeIn, err := inbox.Process(ctx, w.db, w.cfg.Consumer, ev, now, func(tx *gorm.DB) error {
		if effect == nil {
			return nil
		}
		return effect(tx)
	})
	if err != nil {
		return fmt.Errorf("process event %s: %w", ev.EventID, err)
	}
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
		return nil
	}
	// Also after a duplicate: the first delivery's commit may have
	// succeeded with its answer lost, leaving no timer. Arming is a no-op
	// for an armed post, and PublishDue reads the publication's state.
	if after != nil {
		after()
	}
	if cancelled {
		w.observeSettled(PublicationCancelled)
	}
	if w.cfg.ObserveConsumed != nil {
		w.cfg.ObserveConsumed(string(ev.Type), outcome)
	}
	return nil
}
