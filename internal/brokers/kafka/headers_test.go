package kafka

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
)

// Both producer paths write a row's envelope as the Kafka binding's
// binary mode, header by header in this order: the contract's headers, the
// traceparent, the ce_ attributes with ce_sequence, then content-type.
func TestRecordsCarryTheBindingsHeaders(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := outbox.Message{ID: 12, EventID: "0190a3c2-0000-7000-8000-000000000001", EventType: "POSTING_EVENT",
		AggregateID: 42, Payload: `{"postId":42}`, Created: time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC), Traceparent: &tp}
	want := [][2]string{
		{"event-id", m.EventID},
		{"event-type", "POSTING_EVENT"},
		{"traceparent", tp},
		{"ce_specversion", "1.0"},
		{"ce_id", m.EventID},
		{"ce_source", "/posting"},
		{"ce_type", "POSTING_EVENT"},
		{"ce_time", "2026-12-03T10:00:00.123456Z"},
		{"ce_sequence", "00000000000000000012"},
		{"content-type", "application/json"},
	}
	p := &Producer{cfg: ProducerConfig{Topic: "t"}}
	envs := relay.Envelopes([]outbox.Message{m})

	pm := p.saramaMessages(envs)[0]
	key, err := pm.Key.Encode()
	require.NoError(t, err)
	value, err := pm.Value.Encode()
	require.NoError(t, err)
	require.Equal(t, "42", string(key))
	require.Equal(t, `{"postId":42,"sequence":12}`, string(value))
	var got [][2]string
	for _, h := range pm.Headers {
		got = append(got, [2]string{string(h.Key), string(h.Value)})
	}
	require.Equal(t, want, got)

	rec := p.kgoRecords(envs)[0]
	require.Equal(t, "42", string(rec.Key))
	require.Equal(t, `{"postId":42,"sequence":12}`, string(rec.Value))
	got = nil
	for _, h := range rec.Headers {
		got = append(got, [2]string{h.Key, string(h.Value)})
	}
	require.Equal(t, want, got)
}
