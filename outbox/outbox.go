// Package outbox is the transactional outbox: the row that announces a change,
// Append to write it inside the caller's transaction, and the Store that the
// relay and the operator tools use to claim, acknowledge and inspect rows.
package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
)

// EventType is the kind of an event; it is also the Kafka header event-type.
type EventType string

// The event types of the contract.
const (
	// PostingEvent announces a change of a post (action CREATED, UPDATED, CANCELLED).
	PostingEvent EventType = "POSTING_EVENT"
	// ReservationEvent announces that a post is due and now WORKING.
	ReservationEvent EventType = "POSTING_RESERVATION_EVENT"
)

// Status is where a row stands on its way to Kafka.
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

// ErrInvalidEvent is returned by Append for an event it cannot write.
var ErrInvalidEvent = errors.New("invalid outbox event")

// ErrDuplicate is returned by Append when an event with the same dedup key
// already exists: the event it describes was already recorded.
var ErrDuplicate = errors.New("outbox event already recorded")

// Message is one row of the outbox table.
type Message struct {
	ID            int64      `gorm:"column:id;primaryKey;autoIncrement"`
	EventID       string     `gorm:"column:event_id"`
	EventType     EventType  `gorm:"column:event_type"`
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
}

// TableName is the table of the contract.
func (Message) TableName() string { return "outbox" }

// Key is the Kafka message key: the postId in decimal.
func (m Message) Key() string { return strconv.FormatInt(m.AggregateID, 10) }

// Envelope is the part of every event value that the contract fixes; the
// payload of a row is this object plus the fields of its type.
type Envelope struct {
	EventID    string    `json:"eventId"`
	EventType  EventType `json:"eventType"`
	PostID     int64     `json:"postId"`
	OccurredAt time.Time `json:"occurredAt"`
}

// Event is what a service hands to Append.
type Event struct {
	// Type is the event type.
	Type EventType
	// PostID is the aggregate the event is about, and the Kafka key.
	PostID int64
	// OccurredAt is when the change happened, from the service's clock.
	OccurredAt time.Time
	// Fields are the type's own fields; they must marshal to a JSON object
	// and must not repeat the envelope's keys.
	Fields any
	// DedupKey, if set, makes a second Append of the same key fail with
	// ErrDuplicate (the database's unique index decides, across instances).
	DedupKey string
}

// Append writes ev as a PENDING row through tx, which should be the caller's
// transaction that also writes the change the event announces, so both commit
// or neither does. It returns the written row.
func Append(tx *gorm.DB, ev Event) (*Message, error) {
	msg, err := NewMessage(ev)
	if err != nil {
		return nil, err
	}
	if err := tx.Create(msg).Error; err != nil {
		if ev.DedupKey != "" && errors.Is(err, gorm.ErrDuplicatedKey) {
			return nil, fmt.Errorf("%w: dedup key %s", ErrDuplicate, ev.DedupKey)
		}
		return nil, fmt.Errorf("append outbox event: %w", err)
	}
	return msg, nil
}

// NewMessage builds the PENDING row for ev with a new UUIDv7 event id, without
// writing it.
func NewMessage(ev Event) (*Message, error) {
	if ev.Type != PostingEvent && ev.Type != ReservationEvent {
		return nil, fmt.Errorf("%w: type %q", ErrInvalidEvent, ev.Type)
	}
	if ev.PostID <= 0 {
		return nil, fmt.Errorf("%w: post id %d", ErrInvalidEvent, ev.PostID)
	}
	if ev.OccurredAt.IsZero() {
		return nil, fmt.Errorf("%w: no occurrence time", ErrInvalidEvent)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new event id: %w", err)
	}
	at := database.Normalize(ev.OccurredAt)
	payload, err := payloadJSON(Envelope{EventID: id.String(), EventType: ev.Type, PostID: ev.PostID, OccurredAt: at}, ev.Fields)
	if err != nil {
		return nil, err
	}
	msg := &Message{
		EventID:       id.String(),
		EventType:     ev.Type,
		AggregateID:   ev.PostID,
		Payload:       payload,
		Created:       at,
		Status:        StatusPending,
		Version:       1,
		NextAttemptAt: at,
	}
	if ev.DedupKey != "" {
		k := ev.DedupKey
		msg.DedupKey = &k
	}
	return msg, nil
}

func payloadJSON(env Envelope, fields any) (string, error) {
	obj := map[string]json.RawMessage{}
	if fields != nil {
		raw, err := json.Marshal(fields)
		if err != nil {
			return "", fmt.Errorf("%w: fields: %v", ErrInvalidEvent, err)
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", fmt.Errorf("%w: fields are not a JSON object: %v", ErrInvalidEvent, err)
		}
	}
	envRaw, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	var envObj map[string]json.RawMessage
	if err := json.Unmarshal(envRaw, &envObj); err != nil {
		return "", err
	}
	for k, v := range envObj {
		if _, dup := obj[k]; dup {
			return "", fmt.Errorf("%w: fields repeat the envelope key %q", ErrInvalidEvent, k)
		}
		obj[k] = v
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	return string(out), nil
}
