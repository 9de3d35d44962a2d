package rabbitmq

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postingsvc/posting/event"
)

// publishing is the AMQP message of m, with now as its timestamp. The
// headers of the contract (event-id, event-type, traceparent) are headers
// under their own names, the event id and type are also the message_id
// and type properties, and the CloudEvents attributes follow the AMQP
// protocol binding's binary mode: application properties prefixed
// event.CloudEventsAMQPPrefix (the separator the binding prefers), and
// datacontenttype as the message's content_type property. Each value is the
// attribute's canonical string, which the binding allows: AMQP 0-9-1's
// timestamp field type holds whole seconds only, and time would lose its
// microseconds. cloudEvents_sequence is the event's sequence.
func publishing(m event.Message, now time.Time) amqp.Publishing {
	p := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		Timestamp:    now,
		Headers:      make(amqp.Table, len(m.Headers)),
		Body:         m.Value,
	}
	for _, h := range m.Headers {
		switch {
		case !h.Attribute:
			p.Headers[h.Name] = h.Value
			switch h.Name {
			case event.HeaderEventID:
				p.MessageId = h.Value
			case event.HeaderEventType:
				p.Type = h.Value
			}
		case h.Name == event.CloudEventsDataContentType:
			p.ContentType = h.Value
		default:
			p.Headers[event.CloudEventsAMQPPrefix+h.Name] = h.Value
		}
	}
	return p
}
