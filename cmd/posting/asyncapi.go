package main

import (
	"fmt"
	"net/http"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
)

// asyncAPIRoute serves the AsyncAPI document of the messages this service
// sends (GET /asyncapi.json), naming the brokers (the Kafka bootstrap list
// brokers, or the host of POSTING_RABBITMQ_URL), topic and exchange it runs
// with, and the webhook its embedded worker calls (POSTING_PUBLISH_WEBHOOK_URL's
// scheme and host: its path often holds the receiver's credential).
func asyncAPIRoute(s *settings, brokers []string) (http.Handler, error) {
	as := event.AsyncAPISettings{Topic: s.KafkaTopic, Exchange: s.RabbitMQExchange, KafkaBrokers: brokers}
	if s.RabbitMQURL != "" {
		u, err := amqp.ParseURI(s.RabbitMQURL)
		if err != nil {
			return nil, badSetting("POSTING_RABBITMQ_URL", "(hidden)", err)
		}
		as.KafkaBrokers = nil
		as.RabbitMQHost = u.Host + ":" + strconv.Itoa(u.Port)
		as.RabbitMQProtocol, as.RabbitMQVhost = u.Scheme, u.Vhost
	}
	if s.PublishWebhookURL != "" {
		u, err := config.ParseURL(s.PublishWebhookURL) // its error quotes no password
		if err != nil {
			return nil, badSetting("POSTING_PUBLISH_WEBHOOK_URL", "(hidden)", err)
		}
		as.WebhookScheme, as.WebhookHost = u.Scheme, u.Host
	}
	doc, err := event.AsyncAPIServed(as)
	if err != nil {
		return nil, fmt.Errorf("asyncapi document: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
		_, _ = w.Write(doc)
	}), nil
}
