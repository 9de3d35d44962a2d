// Package eventtest builds events of the contract for tests, in the form
// outbox.Append and outbox.NewMessage take, as the service writes them.
package eventtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
)

// Outbox returns a new event of type typ about postID that happened at at,
// with the type's fields, as an outbox event; it fails t if the contract
// refuses it.
func Outbox(t testing.TB, typ event.Type, postID int64, at time.Time, fields any) outbox.Event {
	t.Helper()
	e, err := event.New(typ, postID, at, fields)
	require.NoError(t, err)
	return outbox.Event{ID: e.EventID, Type: string(e.EventType), AggregateID: e.PostID, OccurredAt: e.OccurredAt, Payload: e.Value}
}

// Append writes a CREATED POSTING_EVENT about postID that happened at at
// into db's outbox, as the service would, and returns the row.
func Append(t testing.TB, db *gorm.DB, postID int64, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.Append(db, Outbox(t, event.PostingEvent, postID, at, map[string]any{"action": string(event.ActionCreated)}))
	require.NoError(t, err)
	return *m
}
