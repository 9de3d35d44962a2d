package kafka

import (
	"github.com/postingsvc/posting/event"
)

// headerKey is the Kafka header of the neutral header h: a header of the
// contract (event-id, event-type, traceparent) under its own name, and a
// CloudEvents attribute in the Kafka binding's binary mode: prefixed
// event.CloudEventsKafkaPrefix (ce_specversion, ce_id, ce_source, ce_type,
// ce_time, ce_sequence), datacontenttype as the plain content-type header.
// A CloudEvents consumer thus reads the value as the event's data.
func headerKey(h event.Header) string {
	switch {
	case !h.Attribute:
		return h.Name
	case h.Name == event.CloudEventsDataContentType:
		return event.HeaderContentType
	}
	return event.CloudEventsKafkaPrefix + h.Name
}
