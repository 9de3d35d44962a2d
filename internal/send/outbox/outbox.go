// Package outbox is the transactional outbox: the row that announces a change,
// Append to write it inside the caller's transaction, and the Store that the
// relay and the operator tools use to claim, acknowledge and inspect rows.
package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/storage/database"
)

// tracerName is the instrumentation scope of Append's span.
const tracerName = telemetry.ScopeName + "/outbox"

// Status is where a row stands on its way to the broker.
type Status string

// The row statuses. PENDING and RETRY rows wait to be claimed, PROCESSING rows
// are claimed by one relay instance, SENT rows are acknowledged by the broker,
// FAIL rows have used all their attempts and wait for an operator.
const (
	StatusPending    Status = "PENDING"
	StatusProcessing Status = "PROCESSING"
	StatusSent       Status = "SENT"
	StatusRetry      Status = "RETRY"
	StatusFail       Status = "FAIL"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{StatusPending, StatusProcessing, StatusSent, StatusRetry, StatusFail}

// ErrInvalidEvent is returned by Append and NewMessage for an event whose
// shape the table cannot hold.
var ErrInvalidEvent = errors.New("invalid outbox event")

// ErrDuplicate is returned by Append when an event with the same dedup key
// already exists: the event it describes was already recorded.
var ErrDuplicate = errors.New("outbox event already recorded")

// Message is one row of the outbox table: an event on its way to the
// broker. Like watermill's message.Message it knows no domain: an id, a type
// and an opaque JSON payload, plus the aggregate the event is about, which
// is the message key and the unit of order (the relay sends one aggregate's
// events one at a time, in id order). The other fields are the row's state
// on the way.
type Message struct {
	ID            int64      `gorm:"column:id;primaryKey;autoIncrement"`
	EventID       string     `gorm:"column:event_id"`
	EventType     string     `gorm:"column:event_type"`
	AggregateID   int64      `gorm:"column:aggregate_id"`
	Payload       string     `gorm:"column:payload"`
	Created       time.Time  `gorm:"column:created"`
	Status        Status     `gorm:"column:status"`
	RetryCount    int        `gorm:"column:retry_count"`
	Version       int64      `gorm:"column:version"`
	NextAttemptAt time.Time  `gorm:"column:next_attempt_at"`
	ClaimedBy     *string    `gorm:"column:claimed_by"`
	ClaimedAt     *time.Time `gorm:"column:claimed_at"`
	SentAt        *time.Time `gorm:"column:sent_at"`
	LastError     *string    `gorm:"column:last_error"`
	DedupKey      *string    `gorm:"column:dedup_key"`
	// Traceparent is the W3C trace context of the work that wrote the row
	// (migration 00007), sent as the message's traceparent header; nil:
	// none.
	Traceparent *string `gorm:"column:traceparent"`
}

// TableName is the table of the contract.
func (Message) TableName() string { return "outbox" }

// Key is the message key: the aggregate id in decimal.
func (m Message) Key() string { return strconv.FormatInt(m.AggregateID, 10) }

// MaxTypeLength bounds an event type, in bytes: the shortest limit of the
// type columns a dialect may use (a PostgreSQL enum label holds 63 bytes, a
// MySQL ENUM member 255 characters). Which types a table admits is the
// database's to say (an ENUM on MySQL, a CHECK on SQLite).
const MaxTypeLength = 63

// maxEventIDLength is the event_id column's width, CHAR(36): a UUID.
const maxEventIDLength = 36

// Event is what a producer hands to Append: one event, already encoded.
type Event struct {
	// ID is the event's id, a UUID in its canonical form; it travels with
	// the message, so a consumer drops a redelivery by it.
	ID string
	// Type names the kind of event, 1..MaxTypeLength bytes.
	Type string
	// AggregateID is the positive id of what the event is about: the
	// message key, and the unit of order.
	AggregateID int64
	// OccurredAt is when the change happened, from the producer's clock.
	// It is the row's created time; it orders nothing (the row id does).
	OccurredAt time.Time
	// Payload is the message value, a JSON object, sent as it is.
	Payload json.RawMessage
	// DedupKey, if set, makes a second Append of the same key fail with
	// ErrDuplicate (the database's unique index decides, across instances).
	DedupKey string
	// Traceparent, if set, is the W3C trace context the row stores and the
	// message carries, as it is: a producer that writes many events at once
	// (AppendMany) gives each its own parent. It must be a valid version-00
	// traceparent (55 characters). "": AppendMany stores none, and Append
	// stores the context of the span it starts in tx's context.
	Traceparent string
}

// NotifyChannel is the PostgreSQL channel Announce notifies after outbox
// rows were committed, and that relays LISTEN on to poll at once instead of
// at their next interval.
const NotifyChannel = "posting_outbox"

// Append writes ev as a PENDING row through tx, which should be the caller's
// transaction that also writes the change the event announces, so both commit
// or neither does. It returns the written row. When tx carries a commit
// waker (database.WithCommitWaker: the local relay's Wake and, on
// PostgreSQL, the instance's coalesced Announce, given at wiring time), it
// asks for it after the commit. It never runs NOTIFY inside tx: NOTIFY
// takes a database-wide lock at commit, so writing transactions that ran it
// committed one at a time.
//
// The row's traceparent is ev.Traceparent when the event has one. Otherwise
// it is the trace context of tx's context (the HTTP request's, the scheduler
// run's): Append starts an "outbox append" span there, with the tracer
// provider of the span it finds, and stores that span's context, so the
// consumer's spans are its children. Without a span context (tracing off and
// nothing started one) the row has none.
func Append(tx *gorm.DB, ev Event) (*Message, error) {
	msg, err := NewMessage(ev)
	if err != nil {
		return nil, err
	}
	if msg.Traceparent != nil {
		return msg, insert(tx, msg, ev)
	}
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	parent := trace.SpanFromContext(ctx)
	ctx, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, "outbox append", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.message.id", ev.ID),
			attribute.String("posting.event_type", ev.Type), attribute.Int64("posting.aggregate_id", ev.AggregateID))
	}
	if tp := telemetry.Traceparent(ctx); tp != "" {
		msg.Traceparent = &tp
	}
	if err := insert(tx, msg, ev); err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	// The local relay, if tx carries one's waker, polls once tx commits.
	database.WakeAfterCommit(tx)
	return msg, nil
}

// insert writes Append's row msg, made of ev.
func insert(tx *gorm.DB, msg *Message, ev Event) error {
	if err := tx.Create(msg).Error; err != nil {
		if ev.DedupKey != "" && errors.Is(err, gorm.ErrDuplicatedKey) {
			return fmt.Errorf("%w: dedup key %s", ErrDuplicate, ev.DedupKey)
		}
		return fmt.Errorf("append outbox event: %w", err)
	}
	return nil
}

// NewMessage builds the PENDING row for ev without writing it, after
// checking its shape: a canonical UUID id, a type of 1..MaxTypeLength bytes,
// a positive aggregate id, an occurrence time, a JSON object payload and,
// if set, a traceparent of version 00 (telemetry.ValidTraceparent). What the
// payload says is the producer's business.
func NewMessage(ev Event) (*Message, error) {
	if u, err := uuid.Parse(ev.ID); err != nil || u.String() != ev.ID || len(ev.ID) != maxEventIDLength {
		return nil, fmt.Errorf("%w: id %q is not a UUID in its canonical form", ErrInvalidEvent, ev.ID)
	}
	if ev.Type == "" || len(ev.Type) > MaxTypeLength {
		return nil, fmt.Errorf("%w: type %q is not 1..%d bytes", ErrInvalidEvent, ev.Type, MaxTypeLength)
	}
	if ev.AggregateID <= 0 {
		return nil, fmt.Errorf("%w: aggregate id %d", ErrInvalidEvent, ev.AggregateID)
	}
	if ev.OccurredAt.IsZero() {
		return nil, fmt.Errorf("%w: no occurrence time", ErrInvalidEvent)
	}
	if !jsonObject(ev.Payload) {
		return nil, fmt.Errorf("%w: event %s: payload is not a JSON object", ErrInvalidEvent, ev.ID)
	}
	if ev.Traceparent != "" && !telemetry.ValidTraceparent(ev.Traceparent) {
		return nil, fmt.Errorf("%w: event %s: traceparent %q is not a W3C traceparent of version 00", ErrInvalidEvent, ev.ID, ev.Traceparent)
	}
	at := database.Normalize(ev.OccurredAt)
	msg := &Message{
		EventID:       ev.ID,
		EventType:     ev.Type,
		AggregateID:   ev.AggregateID,
		Payload:       string(ev.Payload),
		Created:       at,
		Status:        StatusPending,
		Version:       1,
		NextAttemptAt: at,
	}
	if ev.DedupKey != "" {
		k := ev.DedupKey
		msg.DedupKey = &k
	}
	if ev.Traceparent != "" {
		tp := ev.Traceparent
		msg.Traceparent = &tp
	}
	return msg, nil
}

// jsonObject reports whether b is one valid JSON object.
func jsonObject(b []byte) bool {
	return json.Valid(b) && bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
}
