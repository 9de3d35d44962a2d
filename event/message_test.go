package event_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
)

// NewMessage writes the contract's headers, the traceparent, then the
// CloudEvents attributes by their own names, and adds the sequence to the
// value; a message that was never a row has no sequence and no traceparent.
func TestNewMessageHeadersInBindingOrder(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := event.NewMessage(event.MessageOf{
		EventID: "0190a3c2-0000-7000-8000-000000000001", Type: string(event.PostingEvent), PostID: 42,
		OccurredAt: t0, Value: []byte(`{"eventId":"x","postId":42}`), Sequence: 7, Traceparent: tp,
	})
	require.Equal(t, "42", m.Key)
	require.Equal(t, `{"eventId":"x","postId":42,"sequence":7}`, string(m.Value))
	require.Equal(t, []event.Header{
		{Name: event.HeaderEventID, Value: "0190a3c2-0000-7000-8000-000000000001"},
		{Name: event.HeaderEventType, Value: "POSTING_EVENT"},
		{Name: event.HeaderTraceparent, Value: tp},
		{Name: "specversion", Value: "1.0", Attribute: true},
		{Name: "id", Value: "0190a3c2-0000-7000-8000-000000000001", Attribute: true},
		{Name: "source", Value: "/posting", Attribute: true},
		{Name: "type", Value: "POSTING_EVENT", Attribute: true},
		{Name: "time", Value: t0.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"), Attribute: true},
		{Name: "sequence", Value: "00000000000000000007", Attribute: true},
		{Name: "datacontenttype", Value: "application/json", Attribute: true},
	}, m.Headers)
	require.Equal(t, "0190a3c2-0000-7000-8000-000000000001", m.EventID())
	require.Equal(t, "POSTING_EVENT", m.EventType())
	require.Equal(t, int64(7), m.Sequence())
	require.Equal(t, tp, m.Get(event.HeaderTraceparent))

	bare := event.NewMessage(event.MessageOf{EventID: "e", Type: "T", PostID: 1, OccurredAt: t0, Value: []byte(`{}`)})
	require.Equal(t, `{}`, string(bare.Value))
	require.Zero(t, bare.Sequence())
	require.Empty(t, bare.Get(event.HeaderTraceparent))
	require.Len(t, bare.Headers, 8)
}
