// Package inbox is the consumer side of the outbox: the event as a consumer
// receives it (Decode checks a message against the contract), the Handler a
// consumer hands events to, and the inbox table that makes processing
// effectively once (Process records the event id in the same transaction as
// the handler's own work, so a redelivery is recognised and skipped).
//
// Nothing here knows a broker; the consume loop (package internal/publish/inbox/consume) feeds
// a Handler, and kafka.Consumer and rabbitmq.Consumer only fetch its messages
// and commit (acknowledge) them once it returned.
package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/storage/database"
)

// ErrMalformed marks a message that does not follow the contract (missing
// headers, bad JSON, unknown type, a key that is not its postId). Retrying it
// cannot help: a consumer logs it with its coordinates, counts it and moves
// on, so one bad message does not stop its partition.
var ErrMalformed = errors.New("malformed event")

// Event is one message of the topic, decoded and checked.
type Event struct {
	// EventID is the event's UUID, the same on every redelivery.
	EventID string
	// Type is the event type.
	Type event.Type
	// PostID is the post the event is about (the message key).
	PostID int64
	// OccurredAt is when the change happened.
	OccurredAt time.Time
	// Sequence is the event's per-post sequence (event.CloudEventsSequence):
	// the value's "sequence", or its ce_sequence / cloudEvents_sequence
	// header. 0 when the message has none (a producer that predates it):
	// such an event is applied without an order check.
	Sequence int64
	// Value is the whole JSON value, for the type's own fields.
	Value json.RawMessage
	// Traceparent is the message's traceparent header (the W3C trace
	// context of the work that wrote the event), "" when it has none. It is
	// not checked: a bad one starts a trace of its own, it does not make
	// the event malformed. Other headers (the CloudEvents ones) are ignored.
	Traceparent string

	// Topic, Partition and Offset say where the message was read.
	Topic     string
	Partition int32
	Offset    int64
}

// Fields decodes the event's type-specific fields into v.
func (e Event) Fields(v any) error {
	if err := json.Unmarshal(e.Value, v); err != nil {
		return fmt.Errorf("%w: event %s: fields: %v", ErrMalformed, e.EventID, err)
	}
	return nil
}

// Coordinates names where the event was read, for logs.
func (e Event) Coordinates() string {
	return fmt.Sprintf("%s/%d@%d", e.Topic, e.Partition, e.Offset)
}

// Handler processes events. Handle returns nil once the event's effects are
// durable; the consumer then commits its offset. An error wrapping
// ErrMalformed skips the event; any other error makes the consumer try the
// same event again after a pause, without moving past it.
type Handler interface {
	Handle(ctx context.Context, ev Event) error
}

// PartitionHandler is a Handler that also hears which partitions it owns, so
// that work it keeps in memory (timers) follows the partitions across
// rebalances and restarts.
type PartitionHandler interface {
	Handler
	// Assigned is called before the first event of a new assignment is
	// handled; an error ends the consumer's session, which then rejoins.
	Assigned(ctx context.Context, topic string, partitions []int32) error
	// Revoked is called after the last event of the partitions was handled
	// and before another member may own them; it must let go of them.
	Revoked(topic string, partitions []int32)
}

// Adopter is a PartitionHandler that can take over the work kept under
// other partitions. A consumer whose broker has one partition and one active
// consumer at a time (a RabbitMQ queue with single active consumer) owns
// everything once it is active, including what a consumer of another broker
// left under partitions that no longer exist (a deployment moved from Kafka
// to RabbitMQ); it calls Adopt before Assigned.
type Adopter interface {
	PartitionHandler
	// Adopt moves the work kept under any partition but partition to it and
	// returns how much it moved.
	Adopt(ctx context.Context, partition int32) (int64, error)
}

// Decode checks a message against the contract (package event) and returns
// its event: the headers event-id (a UUID) and event-type, a JSON object
// value whose eventId, eventType, postId and occurredAt agree with them, a
// known type, and the postId in decimal as the key. Every failure wraps
// ErrMalformed.
func Decode(key []byte, headers map[string]string, value []byte) (Event, error) {
	id, typ := headers[event.HeaderEventID], headers[event.HeaderEventType]
	if id == "" {
		return Event{}, fmt.Errorf("%w: no %s header", ErrMalformed, event.HeaderEventID)
	}
	if typ == "" {
		return Event{}, fmt.Errorf("%w: event %s: no %s header", ErrMalformed, id, event.HeaderEventType)
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		// The inbox keeps ids as CHAR(36): anything else would fail there,
		// and be retried forever instead of skipped.
		return Event{}, fmt.Errorf("%w: %s %q is not a UUID in its canonical form", ErrMalformed, event.HeaderEventID, id)
	}
	var env event.Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return Event{}, fmt.Errorf("%w: event %s: value is not the contract's JSON object: %v", ErrMalformed, id, err)
	}
	switch {
	case !env.EventType.Valid():
		return Event{}, fmt.Errorf("%w: event %s: unknown event type %q", ErrMalformed, id, env.EventType)
	case string(env.EventType) != typ:
		return Event{}, fmt.Errorf("%w: event %s: header %s %q differs from eventType %q", ErrMalformed, id, event.HeaderEventType, typ, env.EventType)
	case env.EventID != id:
		return Event{}, fmt.Errorf("%w: event %s: header %s differs from eventId %q", ErrMalformed, id, event.HeaderEventID, env.EventID)
	case env.PostID <= 0:
		return Event{}, fmt.Errorf("%w: event %s: postId %d", ErrMalformed, id, env.PostID)
	case string(key) != event.Key(env.PostID):
		return Event{}, fmt.Errorf("%w: event %s: key %q is not postId %d", ErrMalformed, id, key, env.PostID)
	case env.OccurredAt.IsZero():
		return Event{}, fmt.Errorf("%w: event %s: no occurredAt", ErrMalformed, id)
	case env.Sequence < 0:
		return Event{}, fmt.Errorf("%w: event %s: sequence %d", ErrMalformed, id, env.Sequence)
	}
	seq, err := headerSequence(headers, env.Sequence)
	if err != nil {
		return Event{}, fmt.Errorf("%w: event %s: %v", ErrMalformed, id, err)
	}
	return Event{EventID: id, Type: env.EventType, PostID: env.PostID, OccurredAt: env.OccurredAt, Sequence: seq, Value: value,
		Traceparent: headers[event.HeaderTraceparent]}, nil
}

// sequenceHeaders are the headers that may carry an event's sequence: the
// CloudEvents Kafka and AMQP bindings' names of the attribute.
var sequenceHeaders = [...]string{
	event.CloudEventsKafkaPrefix + event.CloudEventsSequence,
	event.CloudEventsAMQPPrefix + event.CloudEventsSequence,
}

// headerSequence returns the event's sequence: inValue (the value's
// "sequence", 0 when absent), or the sequence header's when the value has
// none. A header that is not a sequence, or differs from the value's, is an
// error: two readers of one message must not see two orders.
func headerSequence(headers map[string]string, inValue int64) (int64, error) {
	seq := inValue
	for _, name := range sequenceHeaders {
		h, ok := headers[name]
		if !ok {
			continue
		}
		n, err := event.ParseSequence(h)
		if err != nil {
			return 0, fmt.Errorf("header %s: %w", name, err)
		}
		if seq != 0 && n != seq {
			return 0, fmt.Errorf("header %s %d differs from sequence %d", name, n, seq)
		}
		seq = n
	}
	return seq, nil
}

// Record is one row of the inbox table: an event a consumer has processed.
type Record struct {
	Consumer    string    `gorm:"column:consumer;primaryKey"`
	EventID     string    `gorm:"column:event_id;primaryKey"`
	EventType   string    `gorm:"column:event_type"`
	ProcessedAt time.Time `gorm:"column:processed_at"`
}

// TableName is the inbox table of migration 00001.
func (Record) TableName() string { return "inbox" }

// Outcome is what Process did with an event.
type Outcome int

// The outcomes of Process.
const (
	// Applied: fn ran and committed with the inbox row.
	Applied Outcome = iota
	// Duplicate: the consumer had processed the event before; nothing ran.
	Duplicate
	// OutOfOrder: the consumer had applied an event of the post with the
	// same or a higher sequence (a later one, or an earlier copy of one);
	// the event is recorded in the inbox and fn did not run.
	OutOfOrder
)

// Process runs fn and records ev as processed by consumer, in one
// transaction of db, unless consumer processed ev before (Duplicate: it runs
// nothing), or ev has a sequence that is not above the last one consumer
// applied for the post (OutOfOrder: it records ev without running fn, so
// a redelivery is a duplicate). An event without a sequence (0) is applied
// with no order check. The inbox row is written first, so two
// deliveries of one event racing each other serialize on its primary key and
// the second sees a duplicate. fn must be safe to re-run (a transaction that
// lost a deadlock is re-run); it sees none of a failed attempt's writes.
func Process(ctx context.Context, db *gorm.DB, consumer string, ev Event, at time.Time, fn func(tx *gorm.DB) error) (outcome Outcome, err error) {
	err = database.Transaction(ctx, db, func(tx *gorm.DB) error {
		outcome = Applied
		rec := Record{Consumer: consumer, EventID: ev.EventID, EventType: string(ev.Type), ProcessedAt: database.Normalize(at)}
		if err := tx.Create(&rec).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				outcome = Duplicate
				return errDuplicate // roll back; nothing to do
			}
			return fmt.Errorf("record event %s in the inbox: %w", ev.EventID, err)
		}
		if ev.Sequence > 0 {
			newer, err := advanceSequence(tx, consumer, ev.PostID, ev.Sequence)
			if err != nil {
				return fmt.Errorf("event %s: %w", ev.EventID, err)
			}
			if !newer {
				outcome = OutOfOrder
				return nil
			}
		}
		return fn(tx)
	})
	if outcome == Duplicate {
		return Duplicate, nil
	}
	return outcome, err
}

// sequenceRecord is one row of inbox_sequences (migration 00010): the
// highest sequence consumer applied for a post.
type sequenceRecord struct {
	Consumer string `gorm:"column:consumer;primaryKey"`
	PostID   int64  `gorm:"column:post_id;primaryKey;autoIncrement:false"`
	Sequence int64  `gorm:"column:sequence"`
}

func (sequenceRecord) TableName() string { return "inbox_sequences" }

// advanceSequence moves consumer's last applied sequence of the post to
// seq in tx and reports true, unless it is seq or more already: then it
// writes nothing and reports false.
//
// It inserts the row first, then updates it if it was there: an update (a
// locking read) of an absent row would, on MySQL and MariaDB at REPEATABLE
// READ, lock the gap where the row would go, and two events of different new
// posts in one gap would each wait, inserting, for the other's gap lock (a
// deadlock). The insert takes no gap lock, and locks a row present.
func advanceSequence(tx *gorm.DB, consumer string, postID, seq int64) (bool, error) {
	res := database.DriverOf(tx).InsertIgnore(tx).Create(&sequenceRecord{Consumer: consumer, PostID: postID, Sequence: seq})
	if res.Error != nil {
		return false, fmt.Errorf("record the sequence of post %d: %w", postID, res.Error)
	}
	if res.RowsAffected > 0 {
		return true, nil
	}
	res = tx.Model(&sequenceRecord{}).Where("consumer = ? AND post_id = ? AND sequence < ?", consumer, postID, seq).
		Update("sequence", seq)
	if res.Error != nil {
		return false, fmt.Errorf("advance the sequence of post %d: %w", postID, res.Error)
	}
	return res.RowsAffected > 0, nil
}

// errDuplicate rolls back the transaction of a redelivered event.
var errDuplicate = errors.New("inbox: event already processed")

// Processed reports whether consumer has processed the event.
func Processed(ctx context.Context, db *gorm.DB, consumer, eventID string) (bool, error) {
	var n int64
	err := db.WithContext(ctx).Model(&Record{}).Where("consumer = ? AND event_id = ?", consumer, eventID).Count(&n).Error
	return n > 0, err
}
