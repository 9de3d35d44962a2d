package kafka

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// A record read back from the broker is a CloudEvent in the binary content
// mode of the CloudEvents Kafka protocol binding 1.0, checked header by
// header against the binding and the core spec (the SDK's Kafka binding,
// github.com/cloudevents/sdk-go/protocol/kafka_sarama, is not on the module
// proxy): every ce_ header a known attribute with a valid UTF-8 value,
// specversion 1.0, id, source (a URI reference) and type non-empty, time in
// RFC 3339 equal to the value's occurredAt, datacontenttype in the
// content-type header and the value the event data as it is. The contract's
// headers stay, and the traceparent travels when the row has one.
func TestRecordsAreCloudEventsInBinaryMode(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	p := producerTestNew(t, producerTestConfig(b.Addr))
	at := time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC)
	msgs := eventtest.Batch(t, at) // the second has no traceparent: no header
	tp := eventtest.Traceparent
	producerTestRequireAllNil(t, p.Send(context.Background(), msgs))

	recs := b.Records(t, 2, 10*time.Second)
	require.Len(t, recs, 2)
	known := map[string]bool{"specversion": true, "id": true, "source": true, "type": true, "time": true, "sequence": true,
		"subject": true, "dataschema": true}
	for i, r := range recs {
		m := msgs[i]
		require.Equal(t, m.EventID, r.Headers[event.HeaderEventID])
		require.Equal(t, m.EventType, r.Headers[event.HeaderEventType])
		if i == 0 {
			require.Equal(t, tp, r.Headers[event.HeaderTraceparent])
		} else {
			require.NotContains(t, r.Headers, event.HeaderTraceparent, "a row without a traceparent sends none")
		}
		attrs := map[string]string{}
		for k, v := range r.Headers {
			require.True(t, utf8.ValidString(v), "header %s", k)
			if name, ok := strings.CutPrefix(k, "ce_"); ok {
				require.True(t, known[name], "unknown attribute header %s", k)
				attrs[name] = v
			}
		}
		require.Equal(t, "1.0", attrs["specversion"])
		require.Equal(t, m.EventID, attrs["id"])
		require.Equal(t, m.EventType, attrs["type"])
		require.NotEmpty(t, attrs["source"])
		_, err := url.Parse(attrs["source"])
		require.NoError(t, err, "source is not a URI reference")
		ceTime, err := time.Parse(time.RFC3339, attrs["time"])
		require.NoError(t, err)
		require.True(t, ceTime.Equal(at), "ce_time %s", attrs["time"])
		require.Equal(t, "application/json", r.Headers["content-type"])
		require.NotContains(t, attrs, "datacontenttype", "binary mode carries it as content-type")

		var v struct{ OccurredAt string }
		require.NoError(t, json.Unmarshal(r.Value, &v))
		require.Equal(t, v.OccurredAt, attrs["time"], "ce_time and occurredAt differ")
		require.Equal(t, event.FormatSequence(m.ID), attrs["sequence"], "ce_sequence is the row id, 20 digits")
		require.JSONEq(t, string(event.WithSequence([]byte(m.Payload), m.ID)), string(r.Value), "the value is the event data with its sequence")
	}
}
