package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// With POSTING_LOG_FORMAT=json every line serve writes is a JSON object with
// instance_id; with a non-default POSTING_KAFKA_TOPIC the events go to that
// topic and the default one is never made; with POSTING_ADMIN_TOKEN the
// admin endpoints are announced once.
func TestServeJSONLogsCustomTopicAndAdminLine(t *testing.T) {
	t.Parallel()
	kafkaAddr := freeAddr(t)
	p := startServe(t,
		"POSTING_HTTP_ADDR="+freeAddr(t),
		"POSTING_DATA_DIR="+t.TempDir(),
		"POSTING_EMBEDDED_KAFKA_ADDR="+kafkaAddr,
		"POSTING_SCHEDULER_SPEC=@every 1s",
		"POSTING_RESERVATION_LEAD=10m",
		"POSTING_RELAY_INTERVAL=100ms",
		"POSTING_INSTANCE_ID=json-test",
		"POSTING_LOG_FORMAT=json",
		"POSTING_KAFKA_TOPIC=custom-events",
		"POSTING_ADMIN_TOKEN=s3cret-admin-token-of-32-bytes-ok",
	)
	post := createPost(t, p.HTTP, time.Now().Add(2*time.Minute))
	require.Eventually(t, func() bool { return getPost(t, p.HTTP, post["id"])["status"] == "WORKING" },
		30*time.Second, 100*time.Millisecond)
	records := readExactly(t, kafkaAddr, "custom-events", 2)
	require.Equal(t, []string{"POSTING_EVENT", "POSTING_RESERVATION_EVENT"}, eventsOf(records, post["id"]))

	probe, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{kafkaAddr}, Topic: "posting-events"}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, probe.CheckTopic(context.Background()), kafka.ErrProducerTopicMissing, "nothing went to the default topic")
	require.NoError(t, probe.Close())
	p.Terminate(t)

	lines := strings.Split(strings.TrimSpace(p.Out.String()), "\n")
	require.Greater(t, len(lines), 5)
	adminOn := 0
	for _, line := range lines {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), "a JSON line: %s", line)
		require.Equal(t, "json-test", entry["instance_id"], line)
		require.NotEmpty(t, entry["msg"], line)
		if entry["msg"] == "admin endpoints on" {
			adminOn++
		}
	}
	require.Equal(t, 1, adminOn, "admin endpoints on is logged once")
}

// Against a cluster without the topic serve stops at start, naming it.
func TestServeStopsOnMissingTopic(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("something-else", 1))
	out, code := runBinary(t, []string{"POSTING_KAFKA_BROKERS=" + b.Addr, "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_KAFKA_TOPIC=posting-events"}, "serve")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, `kafka topic does not exist: "posting-events"`)
	require.Contains(t, out, "POSTING_KAFKA_TOPIC=posting-events")
	require.NotContains(t, out, "http api listening")
}
