package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
)

// GET /asyncapi.json serves the AsyncAPI document, with the broker and
// topic the service runs with, and without the transport it does not use.
func TestServeServesAsyncAPI(t *testing.T) {
	t.Parallel()
	broker := freeAddr(t)
	p := startServe(t, "POSTING_HTTP_ADDR="+freeAddr(t), "POSTING_DATA_DIR="+t.TempDir(),
		"POSTING_EMBEDDED_KAFKA_ADDR="+broker, "POSTING_KAFKA_TOPIC=custom-events")
	code, body := httpGet(p.HTTP, "/asyncapi.json")
	require.Equal(t, http.StatusOK, code, body)
	var doc struct {
		AsyncAPI string `json:"asyncapi"`
		Servers  map[string]struct {
			Host string `json:"host"`
		} `json:"servers"`
		Channels map[string]struct {
			Address string `json:"address"`
		} `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, "3.0.0", doc.AsyncAPI)
	require.Equal(t, "custom-events", doc.Channels[event.AsyncAPIChannelKafka].Address)
	require.NotContains(t, doc.Channels, event.AsyncAPIChannelRabbitMQ, "serve sends to Kafka only")
	require.Equal(t, broker, doc.Servers[event.AsyncAPIServerKafka].Host)
	require.NotContains(t, doc.Servers, event.AsyncAPIServerRabbitMQ)
	resp, err := http.Get("http://" + p.HTTP + "/asyncapi.json")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	p.Terminate(t)
}
