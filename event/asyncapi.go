package event

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// asyncAPI is the contract of the messages as an AsyncAPI 3.0 document:
// channels (the Kafka topic and the RabbitMQ exchange, by their default
// names), key, headers, and a JSON Schema of each type's value. Tests
// validate every message the service sends against its schemas
// (eventtest.Validator), so the document cannot drift from the code.
//
//go:embed asyncapi.json
var asyncAPI []byte

// AsyncAPIChannelKafka and AsyncAPIChannelRabbitMQ are the document's
// channel ids.
const (
	AsyncAPIChannelKafka    = "postingEventsKafka"
	AsyncAPIChannelRabbitMQ = "postingEventsRabbitMQ"
)

// AsyncAPIDocument returns the AsyncAPI document as it is kept in the
// repository (event/asyncapi.json), with the default topic and exchange.
func AsyncAPIDocument() []byte { return append([]byte(nil), asyncAPI...) }

// AsyncAPI returns the AsyncAPI document with the Kafka channel on topic
// and the RabbitMQ channel on exchange, as a service configured with
// those names sends: what GET /asyncapi.json serves.
func AsyncAPI(topic, exchange string) ([]byte, error) {
	if topic == DefaultTopic && exchange == DefaultTopic { // the RabbitMQ exchange defaults to the topic name
		return AsyncAPIDocument(), nil
	}
	var doc map[string]any
	if err := json.Unmarshal(asyncAPI, &doc); err != nil {
		return nil, fmt.Errorf("asyncapi document: %w", err)
	}
	channels, _ := doc["channels"].(map[string]any)
	kafka, _ := channels[AsyncAPIChannelKafka].(map[string]any)
	rabbit, _ := channels[AsyncAPIChannelRabbitMQ].(map[string]any)
	if kafka == nil || rabbit == nil {
		return nil, fmt.Errorf("asyncapi document: channels %s and %s missing", AsyncAPIChannelKafka, AsyncAPIChannelRabbitMQ)
	}
	kafka["address"], rabbit["address"] = topic, exchange
	kb, _ := kafka["bindings"].(map[string]any)
	kbk, _ := kb["kafka"].(map[string]any)
	rb, _ := rabbit["bindings"].(map[string]any)
	rba, _ := rb["amqp"].(map[string]any)
	ex, _ := rba["exchange"].(map[string]any)
	if kbk == nil || ex == nil {
		return nil, fmt.Errorf("asyncapi document: channel bindings missing")
	}
	kbk["topic"], ex["name"] = topic, exchange
	return json.MarshalIndent(doc, "", "  ")
}
