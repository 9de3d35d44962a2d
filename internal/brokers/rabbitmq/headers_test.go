package rabbitmq

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
)

// A row's envelope is the AMQP binding's binary mode: the contract's
// headers and the cloudEvents_ attributes as headers, the event's id and
// type as properties too, datacontenttype as content_type.
func TestPublishingCarriesTheBindingsHeaders(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := outbox.Message{ID: 12, EventID: "0190a3c2-0000-7000-8000-000000000001", EventType: "POSTING_EVENT",
		AggregateID: 42, Payload: `{"postId":42}`, Created: time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC), Traceparent: &tp}
	now := time.Date(2026, 12, 3, 10, 0, 1, 0, time.UTC)
	require.Equal(t, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.EventID,
		Type:         "POSTING_EVENT",
		Timestamp:    now,
		Headers: amqp.Table{
			"event-id":                m.EventID,
			"event-type":              "POSTING_EVENT",
			"traceparent":             tp,
			"cloudEvents_specversion": "1.0",
			"cloudEvents_id":          m.EventID,
			"cloudEvents_source":      "/posting",
			"cloudEvents_type":        "POSTING_EVENT",
			"cloudEvents_time":        "2026-12-03T10:00:00.123456Z",
			"cloudEvents_sequence":    "00000000000000000012",
		},
		Body: []byte(`{"postId":42,"sequence":12}`),
	}, publishing(relay.Envelope(m), now))

	m.ID, m.Traceparent = 0, nil // a row never written: no sequence, no traceparent
	p := publishing(relay.Envelope(m), now)
	require.NotContains(t, p.Headers, "traceparent")
	require.NotContains(t, p.Headers, "cloudEvents_sequence")
	require.Equal(t, m.Payload, string(p.Body))
}
