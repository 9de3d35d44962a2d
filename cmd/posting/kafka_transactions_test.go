package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
)

// A cluster that refuses the relay's transactional id stops serve at
// start, naming the id's settings and the way out, instead of a relay that
// fails every send; with POSTING_KAFKA_TRANSACTIONS=false the same cluster
// serves.
func TestServeStopsWhenTheClusterRefusesTheTransactionalID(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	b.Cluster.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		if req.(*kmsg.InitProducerIDRequest).TransactionalID == nil {
			return nil, nil, false // an idempotent producer is let through
		}
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	env := []string{"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"), "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_KAFKA_BROKERS=" + b.Addr, "POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_INSTANCE_ID=refused"}
	out, code := runBinary(t, env, "serve")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "kafka transactions (POSTING_KAFKA_TRANSACTIONS=true, POSTING_INSTANCE_ID=refused)")
	require.Contains(t, out, `transactional id "posting-relay-refused"`)
	require.Contains(t, out, "or set POSTING_KAFKA_TRANSACTIONS=false")

	p := startServe(t, append(env, "POSTING_KAFKA_TRANSACTIONS=false")...)
	post := createPost(t, p.HTTP, time.Now().Add(time.Hour))
	records := kafkatest.ReadTopic(t, b.Addr, b.Topic, 1, 30*time.Second)
	require.Equal(t, []string{"POSTING_EVENT"}, eventsOf(records, post["id"]))
}
