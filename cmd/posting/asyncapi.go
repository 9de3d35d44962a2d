package main

import (
	"net/http"
	"strconv"

	"github.com/postingsvc/posting/event"
)

// asyncAPIRoute serves the AsyncAPI document of the messages this service
// sends (GET /asyncapi.json), naming the topic and exchange it is
// configured with.
func asyncAPIRoute(s *settings) (http.Handler, error) {
	doc, err := event.AsyncAPI(s.KafkaTopic, s.RabbitMQExchange)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
		_, _ = w.Write(doc)
	}), nil
}
