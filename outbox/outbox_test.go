package outbox_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/outbox"
)

const shapeID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"

// The outbox checks the shape of an event, not what it says: any type of
// the right length is taken, and the payload is kept as it is.
func TestNewMessageChecksTheShape(t *testing.T) {
	t.Parallel()
	good := outbox.Event{ID: shapeID, Type: "ORDER_SHIPPED", AggregateID: 7, OccurredAt: t0,
		Payload: json.RawMessage(` {"any":"thing"}`), DedupKey: "k"}
	m, err := outbox.NewMessage(good)
	require.NoError(t, err)
	require.Equal(t, shapeID, m.EventID)
	require.Equal(t, "ORDER_SHIPPED", m.EventType)
	require.Equal(t, int64(7), m.AggregateID)
	require.Equal(t, "7", m.Key())
	require.Equal(t, ` {"any":"thing"}`, m.Payload)
	require.Equal(t, outbox.StatusPending, m.Status)
	require.Equal(t, int64(1), m.Version)
	require.True(t, m.Created.Equal(t0))
	require.True(t, m.NextAttemptAt.Equal(t0))
	require.Equal(t, "k", *m.DedupKey)

	for name, change := range map[string]func(*outbox.Event){
		"no id":              func(e *outbox.Event) { e.ID = "" },
		"id not a UUID":      func(e *outbox.Event) { e.ID = "event-1" },
		"id not canonical":   func(e *outbox.Event) { e.ID = strings.ToUpper(shapeID) },
		"no type":            func(e *outbox.Event) { e.Type = "" },
		"type too long":      func(e *outbox.Event) { e.Type = strings.Repeat("T", outbox.MaxTypeLength+1) },
		"aggregate id 0":     func(e *outbox.Event) { e.AggregateID = 0 },
		"negative aggregate": func(e *outbox.Event) { e.AggregateID = -3 },
		"no occurrence time": func(e *outbox.Event) { e.OccurredAt = time.Time{} },
		"no payload":         func(e *outbox.Event) { e.Payload = nil },
		"payload not JSON":   func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":`) },
		"payload an array":   func(e *outbox.Event) { e.Payload = json.RawMessage(`[{"a":1}]`) },
		"payload a string":   func(e *outbox.Event) { e.Payload = json.RawMessage(`"{}"`) },
		"traceparent broken": func(e *outbox.Event) { e.Traceparent = "00-zz-broken-01" },
		"traceparent upper":  func(e *outbox.Event) { e.Traceparent = strings.ToUpper(testTraceparentA) },
		"traceparent long":   func(e *outbox.Event) { e.Traceparent = testTraceparentA + "-extra" },
		"traceparent v01":    func(e *outbox.Event) { e.Traceparent = "01" + testTraceparentA[2:] },
	} {
		t.Run(name, func(t *testing.T) {
			ev := good
			change(&ev)
			_, err := outbox.NewMessage(ev)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		})
	}
	long := good
	long.Type = strings.Repeat("T", outbox.MaxTypeLength)
	_, err = outbox.NewMessage(long)
	require.NoError(t, err, "a type of MaxTypeLength bytes fits")
}
