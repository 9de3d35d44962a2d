package event

import "time"

// Message is one event as every broker carries it, whichever the
// transport: its key, its headers and its value. The relay builds it once
// per outbox row (relay.Envelope) and hands it to a sender, which
// maps each header to its binding (Kafka, AMQP) and writes the value as it
// is. It is the transport-neutral envelope of watermill's message.Message;
// Envelope, in this package, is the part of the value the contract fixes.
type Message struct {
	// Key is the message key: the post id in decimal (Key).
	Key string
	// Headers are the message's headers in the order a binding writes
	// them (NewMessage).
	Headers []Header
	// Value is the event's JSON value with its sequence (WithSequence).
	Value []byte
}

// Header is one header of a Message, under its transport-neutral name:
// a header of the contract (HeaderEventID, HeaderEventType,
// HeaderTraceparent), sent under that name by every binding, or a
// CloudEvents context attribute by its attribute name ("id", "sequence",
// CloudEventsDataContentType...), which each binding names its own way.
type Header struct {
	Name, Value string
	// Attribute says that Name is a CloudEvents context attribute.
	Attribute bool
}

// CloudEventsDataContentType is the datacontenttype attribute's name. The
// Kafka binding sends it as the content-type header (HeaderContentType),
// the AMQP binding as the message's content_type property.
const CloudEventsDataContentType = "datacontenttype"

// MessageOf is what NewMessage builds a Message of: an event as the outbox
// keeps it.
type MessageOf struct {
	// EventID and Type are the event's id and type.
	EventID, Type string
	// PostID is the post the event is about: the key.
	PostID int64
	// OccurredAt is the event's time (the CloudEvents time attribute).
	OccurredAt time.Time
	// Value is the JSON value as the outbox keeps it, without its sequence.
	Value []byte
	// Sequence is the event's sequence (the outbox row's id); 0: none, for
	// a message that was never an outbox row.
	Sequence int64
	// Traceparent is the W3C trace context the message carries; "": none.
	Traceparent string
}

// NewMessage builds the message of e, the one place a message's headers
// and value are made: the contract's event-id and event-type, the
// traceparent when there is one, the CloudEvents attributes (specversion,
// id, source, type, time, then sequence when there is one, then
// datacontenttype), and the value with its sequence.
func NewMessage(e MessageOf) Message {
	hs := make([]Header, 0, 10)
	hs = append(hs,
		Header{Name: HeaderEventID, Value: e.EventID},
		Header{Name: HeaderEventType, Value: e.Type})
	if e.Traceparent != "" {
		hs = append(hs, Header{Name: HeaderTraceparent, Value: e.Traceparent})
	}
	for _, a := range CloudEventsAttributes(e.EventID, e.Type, e.OccurredAt) {
		hs = append(hs, Header{Name: a.Name, Value: a.Value, Attribute: true})
	}
	if e.Sequence > 0 {
		hs = append(hs, Header{Name: CloudEventsSequence, Value: FormatSequence(e.Sequence), Attribute: true})
	}
	hs = append(hs, Header{Name: CloudEventsDataContentType, Value: ContentType, Attribute: true})
	return Message{Key: Key(e.PostID), Headers: hs, Value: WithSequence(e.Value, e.Sequence)}
}

// Get returns the value of the header named name (a CloudEvents attribute
// or a header of the contract, as Header names them), "" when there is none.
func (m Message) Get(name string) string {
	for _, h := range m.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// EventID is the event's id: the event-id header.
func (m Message) EventID() string { return m.Get(HeaderEventID) }

// EventType is the event's type: the event-type header.
func (m Message) EventType() string { return m.Get(HeaderEventType) }

// Sequence is the event's sequence (the sequence attribute), 0 when it has
// none or it does not parse.
func (m Message) Sequence() int64 {
	for _, h := range m.Headers {
		if h.Attribute && h.Name == CloudEventsSequence {
			n, err := ParseSequence(h.Value)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}
