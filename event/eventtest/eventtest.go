// Package eventtest builds events of the contract for tests, in the form
// outbox.Append and outbox.NewMessage take, as the service writes them.
package eventtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
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

// complete returns fields as a JSON object with the contract's required
// fields of typ added where missing.
func complete(t testing.TB, typ event.Type, at time.Time, fields any) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if fields != nil {
		raw, err := json.Marshal(fields)
		require.NoError(t, err, "eventtest: fields")
		require.NoError(t, json.Unmarshal(raw, &obj), "eventtest: fields are not a JSON object")
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
