package eventtest_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
)

func contractTestMessage(t *testing.T, typ event.Type, fields any) eventtest.Message {
	t.Helper()
	e, err := event.New(typ, 42, time.Date(2026, 12, 3, 9, 15, 4, 123456789, time.UTC), fields)
	require.NoError(t, err)
	return eventtest.Message{Key: event.Key(e.PostID), Value: e.Value,
		Headers: map[string]string{event.HeaderEventID: e.EventID, event.HeaderEventType: string(typ)}}
}

func contractTestPosting(t *testing.T) eventtest.Message {
	return contractTestMessage(t, event.PostingEvent, event.PostingEventFields{
		Action: event.ActionCreated, Status: "RESERVED", ScheduledAt: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)})
}

func contractTestReservation(t *testing.T) eventtest.Message {
	return contractTestMessage(t, event.ReservationEvent, event.ReservationEventFields{ScheduledAt: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)})
}

// edit returns m with its value changed by f.
func edit(t *testing.T, m eventtest.Message, f func(map[string]any)) eventtest.Message {
	t.Helper()
	var obj map[string]any
	require.NoError(t, json.Unmarshal(m.Value, &obj))
	f(obj)
	v, err := json.Marshal(obj)
	require.NoError(t, err)
	m.Value = v
	return m
}

func TestValidatorAcceptsEventsAsTheServiceBuildsThem(t *testing.T) {
	t.Parallel()
	v := eventtest.NewTestValidator(t)
	for _, m := range []eventtest.Message{contractTestPosting(t), contractTestReservation(t)} {
		require.NoError(t, v.Validate(m))
		// ownerId and the optional headers (traceparent,
		// CloudEvents) fit, and an unknown header is no error.
		m = edit(t, m, func(o map[string]any) { o["ownerId"] = "user-7" })
		m.Headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		m.Headers["ce_specversion"], m.Headers["ce_id"] = "1.0", m.Headers[event.HeaderEventID]
		m.Headers["ce_type"], m.Headers["ce_source"] = m.Headers[event.HeaderEventType], "/posting"
		m.Headers["ce_time"], m.Headers["content-type"] = "2026-12-03T09:15:04.123456Z", "application/json"
		m.Headers["x-something-new"] = "1"
		require.NoError(t, v.Validate(m))
	}
}

func TestValidatorAcceptsTheDocumentsExamples(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Messages map[string]struct {
				Examples []struct {
					Headers map[string]string `json:"headers"`
					Payload json.RawMessage   `json:"payload"`
				} `json:"examples"`
			} `json:"messages"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(event.AsyncAPIDocument(), &doc))
	v := eventtest.NewTestValidator(t)
	n := 0
	for id, m := range doc.Components.Messages {
		for _, ex := range m.Examples {
			var p struct {
				PostID json.Number `json:"postId"`
			}
			require.NoError(t, json.Unmarshal(ex.Payload, &p))
			require.NoError(t, v.Validate(eventtest.Message{Key: p.PostID.String(), Headers: ex.Headers, Value: ex.Payload}), id)
			n++
		}
	}
	require.Equal(t, 2, n, "one example per event type")
}

func TestValidatorRefusesWhatBreaksTheContract(t *testing.T) {
	t.Parallel()
	v := eventtest.NewTestValidator(t)
	posting, reservation := contractTestPosting(t), contractTestReservation(t)
	cases := map[string]eventtest.Message{
		"missing status":        edit(t, posting, func(o map[string]any) { delete(o, "status") }),
		"missing scheduledAt":   edit(t, reservation, func(o map[string]any) { delete(o, "scheduledAt") }),
		"unknown value field":   edit(t, posting, func(o map[string]any) { o["round"] = 1 }),
		"action in reservation": edit(t, reservation, func(o map[string]any) { o["action"] = "CREATED" }),
		"unknown action":        edit(t, posting, func(o map[string]any) { o["action"] = "PUBLISHED" }),
		"unknown status":        edit(t, posting, func(o map[string]any) { o["status"] = "DONE" }),
		"bad occurredAt":        edit(t, posting, func(o map[string]any) { o["occurredAt"] = "yesterday" }),
		"postId as a string":    edit(t, posting, func(o map[string]any) { o["postId"] = "42" }),
		"ownerId not a string":  edit(t, posting, func(o map[string]any) { o["ownerId"] = 7 }),
		"eventId not the header": edit(t, posting, func(o map[string]any) {
			o["eventId"] = "01938a4e-7c2a-7b3e-9d41-6f0c2b8e5a11"
		}),
		"not JSON": {Key: posting.Key, Headers: posting.Headers, Value: []byte("{not json")},
	}
	wrongKey := posting
	wrongKey.Key = "43"
	cases["key not the postId"] = wrongKey
	for name, hs := range map[string]map[string]string{
		"no event-id":             {event.HeaderEventType: string(event.PostingEvent)},
		"unknown event-type":      {event.HeaderEventID: posting.Headers[event.HeaderEventID], event.HeaderEventType: "POSTING_DELETED"},
		"event-type of the other": {event.HeaderEventID: posting.Headers[event.HeaderEventID], event.HeaderEventType: string(event.ReservationEvent)},
		"traceparent not W3C":     {event.HeaderEventID: posting.Headers[event.HeaderEventID], event.HeaderEventType: string(event.PostingEvent), "traceparent": "abc"},
		"content-type not json":   {event.HeaderEventID: posting.Headers[event.HeaderEventID], event.HeaderEventType: string(event.PostingEvent), "content-type": "text/plain"},
		"ce_specversion not 1.0":  {event.HeaderEventID: posting.Headers[event.HeaderEventID], event.HeaderEventType: string(event.PostingEvent), "ce_specversion": "0.3"},
		"event-id not a UUID":     {event.HeaderEventID: "1", event.HeaderEventType: string(event.PostingEvent)},
	} {
		m := posting
		m.Headers = hs
		cases[name] = m
	}
	for name, m := range cases {
		require.Error(t, v.Validate(m), name)
	}
}

// Every $ref of the document points at something in it, and the channels
// carry the contract's names.
func TestAsyncAPIDocumentIsWhole(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(event.AsyncAPIDocument(), &doc))
	require.Equal(t, "3.0.0", doc["asyncapi"])
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					refs = append(refs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	require.NotEmpty(t, refs)
	for _, r := range refs {
		require.True(t, strings.HasPrefix(r, "#/"), r)
		var at any = doc
		for _, part := range strings.Split(strings.TrimPrefix(r, "#/"), "/") {
			obj, ok := at.(map[string]any)
			require.True(t, ok, "%s: %s is not an object", r, part)
			at, ok = obj[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]
			require.True(t, ok, "%s: no %s", r, part)
		}
	}
	channels := doc["channels"].(map[string]any)
	require.Equal(t, event.DefaultTopic, channels[event.AsyncAPIChannelKafka].(map[string]any)["address"])
	require.Equal(t, event.DefaultTopic, channels[event.AsyncAPIChannelRabbitMQ].(map[string]any)["address"])
}

// The document says what a consumer sees: every action of POSTING_EVENT,
// EXPIRED included, in its titles and descriptions, and that a post's
// reservation may be announced again (with a higher sequence), so that a
// consumer does not take a second POSTING_RESERVATION_EVENT for a fault.
func TestAsyncAPISaysPostsExpireAndReservationsMayBeAnnouncedAgain(t *testing.T) {
	t.Parallel()
	var doc struct {
		Info struct {
			Description string `json:"description"`
		} `json:"info"`
		Components struct {
			Schemas  map[string]struct{ Description string }    `json:"schemas"`
			Messages map[string]struct{ Title, Summary string } `json:"messages"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(event.AsyncAPIDocument(), &doc))
	reservation := doc.Components.Schemas["PostingReservationEvent"].Description
	require.NotContains(t, reservation, "at most one")
	require.Contains(t, reservation, "announced again")
	require.Contains(t, reservation, "higher sequence")
	for _, text := range []string{doc.Info.Description, doc.Components.Schemas["PostingEvent"].Description,
		doc.Components.Messages["postingEvent"].Title} {
		require.Contains(t, strings.ToLower(text), "expired", text)
	}
}

func TestAsyncAPINamesTheConfiguredTopicAndExchange(t *testing.T) {
	t.Parallel()
	same, err := event.AsyncAPI(event.DefaultTopic, event.DefaultTopic)
	require.NoError(t, err)
	require.Equal(t, event.AsyncAPIDocument(), same)

	raw, err := event.AsyncAPI("custom-events", "custom-exchange")
	require.NoError(t, err)
	var doc struct {
		Channels map[string]struct {
			Address  string `json:"address"`
			Bindings struct {
				Kafka struct {
					Topic string `json:"topic"`
				} `json:"kafka"`
				AMQP struct {
					Exchange struct {
						Name string `json:"name"`
					} `json:"exchange"`
				} `json:"amqp"`
			} `json:"bindings"`
		} `json:"channels"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "custom-events", doc.Channels[event.AsyncAPIChannelKafka].Address)
	require.Equal(t, "custom-events", doc.Channels[event.AsyncAPIChannelKafka].Bindings.Kafka.Topic)
	require.Equal(t, "custom-exchange", doc.Channels[event.AsyncAPIChannelRabbitMQ].Address)
	require.Equal(t, "custom-exchange", doc.Channels[event.AsyncAPIChannelRabbitMQ].Bindings.AMQP.Exchange.Name)
}

// asyncAPIServedTestDoc is the part of a served document that names where
// the events go.
type asyncAPIServedTestDoc struct {
	Servers map[string]struct {
		Host        string `json:"host"`
		Protocol    string `json:"protocol"`
		Description string `json:"description"`
	} `json:"servers"`
	Channels map[string]struct {
		Address  string `json:"address"`
		Bindings struct {
			AMQP struct {
				Exchange struct {
					Name  string `json:"name"`
					Vhost string `json:"vhost"`
				} `json:"exchange"`
			} `json:"amqp"`
		} `json:"bindings"`
	} `json:"channels"`
	Operations map[string]any `json:"operations"`
}

func TestAsyncAPIServedNamesTheRunningBrokers(t *testing.T) {
	t.Parallel()
	parse := func(s event.AsyncAPISettings) asyncAPIServedTestDoc {
		raw, err := event.AsyncAPIServed(s)
		require.NoError(t, err)
		var doc asyncAPIServedTestDoc
		require.NoError(t, json.Unmarshal(raw, &doc))
		return doc
	}

	k := parse(event.AsyncAPISettings{Topic: "t1", Exchange: "x1", KafkaBrokers: []string{"kafka-a:9093", "kafka-b:9093"}})
	require.Equal(t, []string{event.AsyncAPIServerKafka}, keys(k.Servers), "the unused transport's server is left out")
	require.Equal(t, "kafka-a:9093", k.Servers[event.AsyncAPIServerKafka].Host)
	require.Contains(t, k.Servers[event.AsyncAPIServerKafka].Description, "kafka-a:9093,kafka-b:9093")
	require.Equal(t, []string{event.AsyncAPIChannelKafka}, keys(k.Channels))
	require.Equal(t, "t1", k.Channels[event.AsyncAPIChannelKafka].Address)
	require.Len(t, k.Operations, 1)

	r := parse(event.AsyncAPISettings{Topic: "t1", Exchange: "x1", RabbitMQHost: "rabbit:5671", RabbitMQProtocol: "amqps", RabbitMQVhost: "posting"})
	require.Equal(t, []string{event.AsyncAPIServerRabbitMQ}, keys(r.Servers))
	require.Equal(t, "rabbit:5671", r.Servers[event.AsyncAPIServerRabbitMQ].Host)
	require.Equal(t, "amqps", r.Servers[event.AsyncAPIServerRabbitMQ].Protocol)
	require.Equal(t, []string{event.AsyncAPIChannelRabbitMQ}, keys(r.Channels))
	require.Equal(t, "x1", r.Channels[event.AsyncAPIChannelRabbitMQ].Bindings.AMQP.Exchange.Name)
	require.Equal(t, "posting", r.Channels[event.AsyncAPIChannelRabbitMQ].Bindings.AMQP.Exchange.Vhost)
	require.Len(t, r.Operations, 1)

	// With a webhook URL, its receiver is a server of the document, and the
	// call a channel at its path.
	w := parse(event.AsyncAPISettings{Topic: "t1", Exchange: "x1", KafkaBrokers: []string{"kafka-a:9093"},
		WebhookScheme: "https", WebhookHost: "hooks.example:8443"})
	require.Equal(t, []string{event.AsyncAPIServerKafka, event.AsyncAPIServerWebhook}, keys(w.Servers))
	require.Equal(t, "hooks.example:8443", w.Servers[event.AsyncAPIServerWebhook].Host)
	require.Equal(t, "https", w.Servers[event.AsyncAPIServerWebhook].Protocol)
	require.Equal(t, []string{event.AsyncAPIChannelKafka, event.AsyncAPIChannelWebhook}, keys(w.Channels))
	require.Empty(t, w.Channels[event.AsyncAPIChannelWebhook].Address, "the path is not told")
	require.Len(t, w.Operations, 2)
}

// keys returns m's keys, sorted.
func keys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// docs/design.md, where it says what a published post emits, names every
// action of the contract.
func TestDesignPageNamesEveryAction(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "design.md"))
	require.NoError(t, err)
	_, sentence, ok := strings.Cut(strings.Join(strings.Fields(string(page)), " "), "the contract's actions are ")
	require.True(t, ok, "docs/design.md lists the contract's actions")
	sentence, _, _ = strings.Cut(sentence, ")")
	for _, a := range []event.Action{event.ActionCreated, event.ActionUpdated, event.ActionCancelled, event.ActionExpired} {
		require.Contains(t, sentence, string(a))
	}
}
