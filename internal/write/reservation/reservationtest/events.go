package reservationtest

// The events of the contract in the form outbox.Append and
// outbox.NewMessage take, as the service writes them (reservation.OutboxEvent).

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// Outbox returns a new event of type typ about postID that happened at at,
// with the type's fields, as an outbox event; it fails t if the contract
// refuses it. Fields the contract requires that fields lacks (nil lacks
// all) are filled in, so the value keeps the AsyncAPI contract that tests
// reading messages check: a POSTING_EVENT gets action CREATED, status
// RESERVED and scheduledAt an hour after at; a POSTING_RESERVATION_EVENT gets
// scheduledAt five minutes after at; both get ownerId "".
func Outbox(t testing.TB, typ event.Type, postID int64, at time.Time, fields any) outbox.Event {
	t.Helper()
	fields = complete(t, typ, at, fields)
	e, err := event.New(typ, postID, at, fields)
	require.NoError(t, err)
	return reservation.OutboxEvent(e, "")
}

// Append writes a CREATED POSTING_EVENT about postID that happened at at
// into db's outbox, as the service would, and returns the row.
func Append(t testing.TB, db *gorm.DB, postID int64, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.Append(db, Outbox(t, event.PostingEvent, postID, at, map[string]any{"action": string(event.ActionCreated)}))
	require.NoError(t, err)
	return *m
}

// Traceparent is the W3C trace context Batch gives its first row.
const Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Batch returns the two events of post 42 that happened at at, as rows 1
// and 2 a relay would claim: its CREATED POSTING_EVENT, with Traceparent,
// and its POSTING_RESERVATION_EVENT, without one.
func Batch(t testing.TB, at time.Time) []outbox.Message {
	t.Helper()
	var msgs []outbox.Message
	for i, typ := range []event.Type{event.PostingEvent, event.ReservationEvent} {
		fields := map[string]any{"action": "CREATED", "status": "RESERVED", "scheduledAt": at}
		if typ == event.ReservationEvent {
			fields = map[string]any{"scheduledAt": at}
		}
		m, err := outbox.NewMessage(Outbox(t, typ, 42, at, fields))
		require.NoError(t, err)
		m.ID = int64(i + 1)
		msgs = append(msgs, *m)
	}
	tp := Traceparent
	msgs[0].Traceparent = &tp
	return msgs
}

// complete returns fields as a JSON object with the contract's required
// fields of typ added where missing.
func complete(t testing.TB, typ event.Type, at time.Time, fields any) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if fields != nil {
		raw, err := json.Marshal(fields)
		require.NoError(t, err, "reservationtest: fields")
		require.NoError(t, json.Unmarshal(raw, &obj), "reservationtest: fields are not a JSON object")
		if obj == nil {
			obj = map[string]any{}
		}
	}
	defaults := map[string]any{"ownerId": "", "scheduledAt": at.UTC().Add(5 * time.Minute).Format(time.RFC3339Nano)}
	if typ == event.PostingEvent {
		defaults = map[string]any{
			"ownerId":     "",
			"action":      string(event.ActionCreated),
			"status":      "RESERVED",
			"scheduledAt": at.UTC().Add(time.Hour).Format(time.RFC3339Nano),
		}
	}
	for k, v := range defaults {
		if _, ok := obj[k]; !ok {
			obj[k] = v
		}
	}
	return obj
}
