package event_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/clocktest"
)

var t0 = clocktest.T0

// The value is the envelope plus the type's fields in one object, with keys
// in a stable order, and the id a UUIDv7.
func TestNewMergesEnvelopeAndFields(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 13, 0, 0, 123456789, time.FixedZone("CET", 3600))
	e, err := event.New(event.PostingEvent, 42, at, event.PostingEventFields{
		Action: event.ActionCreated, Status: "RESERVED", ScheduledAt: t0, OwnerID: "alice"})
	require.NoError(t, err)
	id, err := uuid.Parse(e.EventID)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(7), id.Version())
	require.Equal(t, event.PostingEvent, e.EventType)
	require.Equal(t, int64(42), e.PostID)
	require.Equal(t, time.Date(2026, 12, 1, 12, 0, 0, 123456000, time.UTC), e.OccurredAt, "UTC, microseconds")
	require.Equal(t, `{"action":"CREATED","eventId":"`+e.EventID+`","eventType":"POSTING_EVENT","occurredAt":"2026-12-01T12:00:00.123456Z","ownerId":"alice","postId":42,"scheduledAt":"2026-12-01T12:00:00Z","status":"RESERVED"}`,
		string(e.Value))

	r, err := event.New(event.ReservationEvent, 42, t0, event.ReservationEventFields{ScheduledAt: t0.Add(time.Minute)})
	require.NoError(t, err)
	require.NotEqual(t, e.EventID, r.EventID)
	var env event.Envelope
	require.NoError(t, json.Unmarshal(r.Value, &env))
	require.Equal(t, r.Envelope, env)

	bare, err := event.New(event.PostingEvent, 1, t0, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"eventId":"`+bare.EventID+`","eventType":"POSTING_EVENT","postId":1,"occurredAt":"2026-12-01T12:00:00Z"}`, string(bare.Value))
}

func TestNewRefusesWhatTheContractDoesNot(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		typ    event.Type
		post   int64
		at     time.Time
		fields any
	}{
		"unknown type":          {"OTHER", 1, t0, nil},
		"no type":               {"", 1, t0, nil},
		"post id 0":             {event.PostingEvent, 0, t0, nil},
		"negative post id":      {event.PostingEvent, -1, t0, nil},
		"no occurrence time":    {event.PostingEvent, 1, time.Time{}, nil},
		"fields not an object":  {event.PostingEvent, 1, t0, []int{1}},
		"fields not JSON":       {event.PostingEvent, 1, t0, func() {}},
		"fields repeat postId":  {event.PostingEvent, 1, t0, map[string]any{"postId": 2}},
		"fields repeat eventId": {event.ReservationEvent, 1, t0, map[string]any{"eventId": "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := event.New(c.typ, c.post, c.at, c.fields)
			require.ErrorIs(t, err, event.ErrInvalid)
		})
	}
}

func TestContractNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "posting-events", event.DefaultTopic)
	require.Equal(t, "event-id", event.HeaderEventID)
	require.Equal(t, "event-type", event.HeaderEventType)
	require.Equal(t, "42", event.Key(42))
	require.Equal(t, "reservation:42", event.ReservationDedupKey(42))
	for _, typ := range event.Types {
		require.True(t, typ.Valid(), typ)
	}
	require.False(t, event.Type("OTHER").Valid())
	require.False(t, event.Type("").Valid())
}

// The sequence goes into the value among its keys in byte order, as New
// writes them, and into headers as 20 zero-padded digits that order as
// strings the way the numbers do.
func TestWithSequence(t *testing.T) {
	t.Parallel()
	ev, err := event.New(event.ReservationEvent, 42, time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC),
		event.ReservationEventFields{ScheduledAt: time.Date(2026, 12, 4, 11, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	got := event.WithSequence(ev.Value, 12)
	var m map[string]any
	require.NoError(t, json.Unmarshal(got, &m))
	require.EqualValues(t, 12, m["sequence"])
	sorted, err := json.Marshal(m)
	require.NoError(t, err)
	require.JSONEq(t, string(sorted), string(got))
	require.Equal(t, strings.Index(string(sorted), `"sequence"`), strings.Index(string(got), `"sequence"`), "keys in byte order")
	require.Equal(t, string(got), string(event.WithSequence(got, 13)), "a value with a sequence keeps it")

	require.Equal(t, "00000000000000000012", event.FormatSequence(12))
	require.Less(t, event.FormatSequence(9), event.FormatSequence(10))
	n, err := event.ParseSequence(event.FormatSequence(1 << 62))
	require.NoError(t, err)
	require.EqualValues(t, int64(1<<62), n)
}
