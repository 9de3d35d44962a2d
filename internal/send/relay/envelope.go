package relay

import (
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
)

// Envelope is the message a broker carries for the outbox row m
// (event.NewMessage): its key, its headers with its traceparent and its
// sequence (the row's id; none for a row never written), and its value with
// that sequence. The relay builds it once per row and hands it to its
// Sender, which maps it to its transport; the row itself stays on the
// database side.
func Envelope(m outbox.Message) event.Message {
	var tp string
	if m.Traceparent != nil {
		tp = *m.Traceparent
	}
	return event.NewMessage(event.MessageOf{
		EventID: m.EventID, Type: m.EventType, PostID: m.AggregateID, OccurredAt: m.Created,
		Value: []byte(m.Payload), Sequence: m.ID, Traceparent: tp,
	})
}

// Envelopes are the messages of msgs, in order (Envelope).
func Envelopes(msgs []outbox.Message) []event.Message {
	out := make([]event.Message, len(msgs))
	for i, m := range msgs {
		out[i] = Envelope(m)
	}
	return out
}
