package event

import "time"

// HeaderTraceparent is the message header that carries the W3C trace context
// (https://www.w3.org/TR/trace-context/#traceparent-header) of the request or
// job that wrote the event, so a consumer continues its trace. It is absent
// when the outbox row has none (rows written before migration 00007).
const HeaderTraceparent = "traceparent"

// The CloudEvents 1.0 attributes every message carries besides the
// contract's headers (binary content mode: the value is the event data as
// it is, the attributes are headers). The Kafka binding prefixes them with
// CloudEventsKafkaPrefix and sends the data content type as the plain
// content-type header; the AMQP binding prefixes them with
// CloudEventsAMQPPrefix and uses the message's content_type property.
const (
	// CloudEventsSpecVersion is the specversion attribute.
	CloudEventsSpecVersion = "1.0"
	// CloudEventsSource is the source attribute: the service, as a URI
	// reference. With id it identifies an event.
	CloudEventsSource = "/posting"
	// ContentType is the media type of every value (datacontenttype).
	ContentType = "application/json"
	// CloudEventsKafkaPrefix prefixes each attribute's Kafka header
	// (CloudEvents Kafka protocol binding 1.0, section 3.2.3).
	CloudEventsKafkaPrefix = "ce_"
	// HeaderContentType is the Kafka header of the data content type in
	// binary mode (section 3.2.1 of the same binding).
	HeaderContentType = "content-type"
	// CloudEventsAMQPPrefix prefixes each attribute's AMQP application
	// property: the '_' form, which the AMQP protocol binding says SHOULD be
	// preferred over "cloudEvents:" for JMS 2.0 clients and selectors.
	CloudEventsAMQPPrefix = "cloudEvents_"
)

// CloudEventsAttribute is one CloudEvents context attribute, by its
// unprefixed name, in its canonical string form.
type CloudEventsAttribute struct {
	Name, Value string
}

// CloudEventsAttributes returns the context attributes of the event with id
// and type typ that occurred at occurredAt: specversion, id, source, type
// and time. time is occurredAt in RFC 3339 (UTC, as the value's occurredAt
// is written); datacontenttype is the binding's content type, not one of
// these.
func CloudEventsAttributes(id, typ string, occurredAt time.Time) [5]CloudEventsAttribute {
	return [5]CloudEventsAttribute{
		{"specversion", CloudEventsSpecVersion},
		{"id", id},
		{"source", CloudEventsSource},
		{"type", typ},
		{"time", occurredAt.UTC().Format(time.RFC3339Nano)},
	}
}
