package event

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// asyncAPI is the contract of the messages as an AsyncAPI 3.0 document:
// servers, channels (the Kafka topic and the RabbitMQ exchange, by their
// default names), key, headers, and a JSON Schema of each type's value.
// Tests validate every message the service sends against its schemas
// (eventtest.Validator), so the document cannot drift from the code.
//
//go:embed asyncapi.json
var asyncAPI []byte

// AsyncAPIChannelKafka and AsyncAPIChannelRabbitMQ are the document's
// channel ids; AsyncAPIServerKafka and AsyncAPIServerRabbitMQ its server
// ids.
const (
	AsyncAPIChannelKafka    = "postingEventsKafka"
	AsyncAPIChannelRabbitMQ = "postingEventsRabbitMQ"
	AsyncAPIServerKafka     = "kafka"
	AsyncAPIServerRabbitMQ  = "rabbitmq"
	// AsyncAPIChannelWebhook and AsyncAPIServerWebhook describe the
	// worker's webhook call (POSTING_PUBLISH_WEBHOOK_URL).
	AsyncAPIChannelWebhook = "publishedPostWebhook"
	AsyncAPIServerWebhook  = "webhook"
)

// asyncAPIOperations names the send operation of each channel.
var asyncAPIOperations = map[string]string{
	AsyncAPIChannelKafka:    "sendPostingEventsKafka",
	AsyncAPIChannelRabbitMQ: "sendPostingEventsRabbitMQ",
	AsyncAPIChannelWebhook:  "sendPublishedPostWebhook",
}

// AsyncAPIDocument returns the AsyncAPI document as it is kept in the
// repository (event/asyncapi.json): both transports, with the default
// topic, exchange and local addresses.
func AsyncAPIDocument() []byte { return append([]byte(nil), asyncAPI...) }

// AsyncAPI returns the AsyncAPI document with the Kafka channel on topic
// and the RabbitMQ channel on exchange, both transports kept.
func AsyncAPI(topic, exchange string) ([]byte, error) {
	if topic == DefaultTopic && exchange == DefaultTopic { // the RabbitMQ exchange defaults to the topic name
		return AsyncAPIDocument(), nil
	}
	return AsyncAPIServed(AsyncAPISettings{Topic: topic, Exchange: exchange})
}

// AsyncAPISettings are the running settings a served document is built
// from. With neither KafkaBrokers nor RabbitMQHost set, both transports
// stay as in the repository's document.
type AsyncAPISettings struct {
	// Topic is the Kafka topic (POSTING_KAFKA_TOPIC).
	Topic string
	// Exchange is the RabbitMQ exchange (POSTING_RABBITMQ_EXCHANGE).
	Exchange string
	// KafkaBrokers is the bootstrap list the relay sends to (the embedded
	// broker's address when embedded). When set, the document describes
	// Kafka alone: its server's host is the first broker, the description
	// lists them all.
	KafkaBrokers []string
	// RabbitMQHost is host:port of POSTING_RABBITMQ_URL, RabbitMQProtocol
	// its scheme (amqp or amqps) and RabbitMQVhost its virtual host. When
	// RabbitMQHost is set, the document describes RabbitMQ alone. The URL's
	// credentials are never part of the document.
	RabbitMQHost, RabbitMQProtocol, RabbitMQVhost string
	// WebhookScheme and WebhookHost are those of
	// POSTING_PUBLISH_WEBHOOK_URL. Its credentials, path and query are
	// never part of the document: Slack, Discord and Teams keep the
	// webhook's credential in the path. A running service (KafkaBrokers
	// or RabbitMQHost set) with no WebhookHost calls no webhook, and the
	// document leaves the webhook out.
	WebhookScheme, WebhookHost string
}

// AsyncAPIServed returns the document a service running with s sends by:
// GET /asyncapi.json. Its servers are the brokers it sends to, its channels
// the topic or exchange it is configured with, and the transport it does
// not use is left out, with its server, channel and operation.
func AsyncAPIServed(s AsyncAPISettings) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(asyncAPI, &doc); err != nil {
		return nil, fmt.Errorf("asyncapi document: %w", err)
	}
	servers, _ := doc["servers"].(map[string]any)
	channels, _ := doc["channels"].(map[string]any)
	operations, _ := doc["operations"].(map[string]any)
	kafka, _ := channels[AsyncAPIChannelKafka].(map[string]any)
	rabbit, _ := channels[AsyncAPIChannelRabbitMQ].(map[string]any)
	kafkaServer, _ := servers[AsyncAPIServerKafka].(map[string]any)
	rabbitServer, _ := servers[AsyncAPIServerRabbitMQ].(map[string]any)
	if kafka == nil || rabbit == nil || kafkaServer == nil || rabbitServer == nil || operations == nil {
		return nil, fmt.Errorf("asyncapi document: channels %s and %s or their servers missing", AsyncAPIChannelKafka, AsyncAPIChannelRabbitMQ)
	}
	kafka["address"], rabbit["address"] = s.Topic, s.Exchange
	kb, _ := kafka["bindings"].(map[string]any)
	kbk, _ := kb["kafka"].(map[string]any)
	rb, _ := rabbit["bindings"].(map[string]any)
	rba, _ := rb["amqp"].(map[string]any)
	ex, _ := rba["exchange"].(map[string]any)
	if kbk == nil || ex == nil {
		return nil, fmt.Errorf("asyncapi document: channel bindings missing")
	}
	kbk["topic"], ex["name"] = s.Topic, s.Exchange
	kafka["title"] = "Kafka topic " + s.Topic
	rabbit["title"] = "RabbitMQ exchange " + s.Exchange

	drop := func(server, channel string) {
		delete(servers, server)
		delete(channels, channel)
		delete(operations, asyncAPIOperations[channel])
	}
	if s.WebhookHost != "" {
		hook, _ := channels[AsyncAPIChannelWebhook].(map[string]any)
		hookServer, _ := servers[AsyncAPIServerWebhook].(map[string]any)
		if hook == nil || hookServer == nil {
			return nil, fmt.Errorf("asyncapi document: channel %s or its server missing", AsyncAPIChannelWebhook)
		}
		hookServer["host"], hookServer["protocol"] = s.WebhookHost, s.WebhookScheme
		// null: the path is not told (AsyncAPI 3.0: an unknown address).
		hook["address"] = nil
	} else if s.RabbitMQHost != "" || len(s.KafkaBrokers) > 0 {
		drop(AsyncAPIServerWebhook, AsyncAPIChannelWebhook)
	}
	switch {
	case s.RabbitMQHost != "":
		drop(AsyncAPIServerKafka, AsyncAPIChannelKafka)
		rabbitServer["host"] = s.RabbitMQHost
		if s.RabbitMQProtocol != "" {
			rabbitServer["protocol"] = s.RabbitMQProtocol
		}
		vhost := s.RabbitMQVhost
		if vhost == "" {
			vhost = "/"
		}
		ex["vhost"] = vhost
		rabbitServer["description"] = "The RabbitMQ broker of POSTING_RABBITMQ_URL (credentials left out), virtual host " + vhost + "."
	case len(s.KafkaBrokers) > 0:
		drop(AsyncAPIServerRabbitMQ, AsyncAPIChannelRabbitMQ)
		kafkaServer["host"] = s.KafkaBrokers[0]
		kafkaServer["description"] = "Bootstrap list the service sends to: " + strings.Join(s.KafkaBrokers, ",") +
			" (POSTING_KAFKA_BROKERS, or the embedded broker on POSTING_EMBEDDED_KAFKA_ADDR)."
	}
	return json.MarshalIndent(doc, "", "  ")
}
