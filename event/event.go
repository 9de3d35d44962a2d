// Package event is the contract of the messages the service sends about
// posts: the event types, their envelope and fields, the headers, the key and
// the default topic. It knows no transport and no storage.
package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// DefaultTopic is the contract's topic for both event types.
const DefaultTopic = "posting-events"

// The headers every message carries, so a consumer can drop a redelivery and
// route by type without parsing the value.
const (
	// HeaderEventID holds the event's id, a UUID in its canonical form.
	HeaderEventID = "event-id"
	// HeaderEventType holds the event's Type.
	HeaderEventType = "event-type"
)

// Type is the kind of an event: the value's eventType and the header
// event-type.
type Type string

// The event types of the contract.
const (
	// PostingEvent announces a change of a post (action CREATED, UPDATED,
	// CANCELLED, EXPIRED); its value adds PostingEventFields.
	PostingEvent Type = "POSTING_EVENT"
	// ReservationEvent announces that a post is due and now WORKING; its
	// value adds ReservationEventFields. A post has one
	// (ReservationDedupKey), and one more each time the overdue check
	// announces it again, with a higher sequence.
	ReservationEvent Type = "POSTING_RESERVATION_EVENT"
)

// Types lists the event types of the contract.
var Types = []Type{PostingEvent, ReservationEvent}

// Valid reports whether t is one of the contract's types.
func (t Type) Valid() bool { return t == PostingEvent || t == ReservationEvent }

// Action is what a POSTING_EVENT says happened to a post.
type Action string

// The actions of POSTING_EVENT. Publishing a post emits no event.
const (
	ActionCreated   Action = "CREATED"
	ActionUpdated   Action = "UPDATED"
	ActionCancelled Action = "CANCELLED"
	// ActionExpired: the post was not published by its publishBy and
	// never will be.
	ActionExpired Action = "EXPIRED"
)

// Envelope is the part of every event value that the contract fixes; the
// value is this object plus the fields of its type.
type Envelope struct {
	EventID    string    `json:"eventId"`
	EventType  Type      `json:"eventType"`
	PostID     int64     `json:"postId"`
	OccurredAt time.Time `json:"occurredAt"`
	// Sequence is the event's per-post sequence (see CloudEventsSequence),
	// which the senders add to the value: 0 (absent) in the outbox and in
	// messages of producers that predate it.
	Sequence int64 `json:"sequence,omitempty"`
}

// PostingEventFields are the fields a POSTING_EVENT adds to the envelope.
type PostingEventFields struct {
	// Action is what happened to the post.
	Action Action `json:"action"`
	// Status is the post's status after the change (RESERVED, WORKING,
	// PUBLISHED, CANCELLED or EXPIRED, as reservation.Status names them).
	Status string `json:"status"`
	// ScheduledAt is the post's time after the change.
	ScheduledAt time.Time `json:"scheduledAt"`
	// OwnerID is the post's owner: the JWT subject that created it, "" for
	// a post created without authentication. Always present.
	OwnerID string `json:"ownerId"`
	// SeriesID is the recurring series the post is an occurrence of;
	// absent for a post created on its own.
	SeriesID *int64 `json:"seriesId,omitempty"`
	// Occurrence is the occurrence's local date-time in its series' zone
	// (2026-03-29T02:30:00, no offset); absent for a post created on its
	// own.
	Occurrence string `json:"occurrence,omitempty"`
}

// ReservationEventFields are the fields a POSTING_RESERVATION_EVENT adds to
// the envelope.
type ReservationEventFields struct {
	// ScheduledAt is when the post is to be published.
	ScheduledAt time.Time `json:"scheduledAt"`
	// OwnerID is the post's owner, as in PostingEventFields.
	OwnerID string `json:"ownerId"`
}

// ReservationDedupKey is the outbox dedup key of a post's reservation event:
// the unique index on it makes a second reservation event of the post
// impossible, however many schedulers run.
func ReservationDedupKey(postID int64) string { return fmt.Sprintf("reservation:%d", postID) }

// Key is the message key of an event about postID: the postId in decimal,
// so that every event of a post goes to one partition, in order.
func Key(postID int64) string { return strconv.FormatInt(postID, 10) }

// ErrInvalid is returned by New for an event the contract does not allow.
var ErrInvalid = errors.New("invalid event")

// Event is one event, encoded: its envelope and the whole JSON value.
type Event struct {
	Envelope
	// Value is the message value: the envelope's keys and the type's
	// fields in one JSON object.
	Value json.RawMessage
}

// New builds the event of type typ about post postID, which happened at at,
// with a new UUIDv7 event id. fields are the type's own fields (such as
// PostingEventFields); they must marshal to a JSON object that does not
// repeat the envelope's keys. occurredAt is at in UTC to the microsecond,
// the precision the outbox keeps, so the value and its row agree.
func New(typ Type, postID int64, at time.Time, fields any) (Event, error) {
	if !typ.Valid() {
		return Event{}, fmt.Errorf("%w: type %q", ErrInvalid, typ)
	}
	if postID <= 0 {
		return Event{}, fmt.Errorf("%w: post id %d", ErrInvalid, postID)
	}
	if at.IsZero() {
		return Event{}, fmt.Errorf("%w: no occurrence time", ErrInvalid)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("new event id: %w", err)
	}
	env := Envelope{EventID: id.String(), EventType: typ, PostID: postID, OccurredAt: at.UTC().Truncate(time.Microsecond)}
	value, err := valueJSON(env, fields)
	if err != nil {
		return Event{}, err
	}
	return Event{Envelope: env, Value: value}, nil
}

// valueJSON merges the envelope and fields into one JSON object, its keys
// in byte order. The contract's own fields are written straight
// (contractValueJSON); other fields are marshalled with the envelope and
// their members merged as they are (mergeSorted); what that does not take
// apart goes through maps (valueJSONMaps). All three write the same bytes.
func valueJSON(env Envelope, fields any) (json.RawMessage, error) {
	if value, ok := contractValueJSON(env, fields); ok {
		return value, nil
	}
	envRaw, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	fieldsRaw := []byte("{}")
	if fields != nil {
		if fieldsRaw, err = json.Marshal(fields); err != nil {
			return nil, fmt.Errorf("%w: fields: %v", ErrInvalid, err)
		}
		if string(fieldsRaw) == "null" {
			fieldsRaw = []byte("{}")
		}
	}
	merged, dup, ok := mergeSorted(fieldsRaw, envRaw)
	switch {
	case ok && dup != "":
		return nil, fmt.Errorf("%w: fields repeat the envelope key %q", ErrInvalid, dup)
	case ok:
		return merged, nil
	}
	return valueJSONMaps(env, fields)
}

// valueJSONMaps merges the envelope and fields into one JSON object through
// maps.
func valueJSONMaps(env Envelope, fields any) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if fields != nil {
		raw, err := json.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("%w: fields: %v", ErrInvalid, err)
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("%w: fields are not a JSON object: %v", ErrInvalid, err)
		}
		if obj == nil { // fields marshalled to null
			obj = map[string]json.RawMessage{}
		}
	}
	envRaw, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	var envObj map[string]json.RawMessage
	if err := json.Unmarshal(envRaw, &envObj); err != nil {
		return nil, err
	}
	for k, v := range envObj {
		if _, dup := obj[k]; dup {
			return nil, fmt.Errorf("%w: fields repeat the envelope key %q", ErrInvalid, k)
		}
		obj[k] = v
	}
	return json.Marshal(obj)
}
