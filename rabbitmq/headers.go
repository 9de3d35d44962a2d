package rabbitmq

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
)

// withExtraHeaders adds to the contract's headers h of m the row's
// traceparent when it has one, and the CloudEvents attributes of the AMQP
// protocol binding's binary mode as application properties prefixed
// "cloudEvents_" (the separator the binding prefers; datacontenttype is the
// message's content_type property). Each value is the attribute's canonical
// string, which the binding allows: AMQP 0-9-1's timestamp field type holds
// whole seconds only, and time would lose its microseconds.
// cloudEvents_sequence is the row's id (event.FormatSequence).
func withExtraHeaders(h amqp.Table, m outbox.Message) amqp.Table {
	if m.Traceparent != nil && *m.Traceparent != "" {
		h[event.HeaderTraceparent] = *m.Traceparent
	}
	for _, a := range event.CloudEventsAttributes(m.EventID, m.EventType, m.Created) {
		h[event.CloudEventsAMQPPrefix+a.Name] = a.Value
	}
	if m.ID > 0 { // a row never written has no sequence
		h[event.CloudEventsAMQPPrefix+event.CloudEventsSequence] = event.FormatSequence(m.ID)
	}
	return h
}
