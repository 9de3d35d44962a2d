package kafka

import (
	"github.com/IBM/sarama"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
)

// extraHeaders are the headers of m's record after the contract's event-id
// and event-type: the row's traceparent when it has one, and the CloudEvents
// Kafka binding's binary-mode headers (ce_specversion, ce_id, ce_source,
// ce_type, ce_time, ce_sequence (the row's id, event.FormatSequence), and content-type for datacontenttype), so that a
// CloudEvents consumer reads the value as the event's data.
func extraHeaders(m outbox.Message) []sarama.RecordHeader {
	hs := make([]sarama.RecordHeader, 0, 8)
	if m.Traceparent != nil && *m.Traceparent != "" {
		hs = append(hs, sarama.RecordHeader{Key: []byte(event.HeaderTraceparent), Value: []byte(*m.Traceparent)})
	}
	for _, a := range event.CloudEventsAttributes(m.EventID, m.EventType, m.Created) {
		hs = append(hs, sarama.RecordHeader{Key: []byte(event.CloudEventsKafkaPrefix + a.Name), Value: []byte(a.Value)})
	}
	if m.ID > 0 { // a row never written has no sequence
		hs = append(hs, sarama.RecordHeader{Key: []byte(event.CloudEventsKafkaPrefix + event.CloudEventsSequence), Value: []byte(event.FormatSequence(m.ID))})
	}
	return append(hs, sarama.RecordHeader{Key: []byte(event.HeaderContentType), Value: []byte(event.ContentType)})
}
