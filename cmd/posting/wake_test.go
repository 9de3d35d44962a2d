package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka/kafkatest"
)

// With the default 5 s relay interval, a post created over HTTP is on the
// topic well before the next poll: the API's commit wakes the local relay
// (serve wires the relay's Wake into the writers' db). Embedded SQLite and
// MariaDB, where nothing else would wake it.
func TestServeCommitWakesRelay(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]string{"sqlite": "", "mysql": databasetest.MySQLURL(t, "wake")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kafkaAddr := freeAddr(t)
			p := startServe(t,
				"POSTING_HTTP_ADDR="+freeAddr(t),
				"POSTING_DATA_DIR="+t.TempDir(),
				"POSTING_EMBEDDED_KAFKA_ADDR="+kafkaAddr,
				"POSTING_DATABASE_URL="+url,
				"POSTING_INSTANCE_ID=wake-test",
			)
			for i := 1; i <= 3; i++ {
				post := createPost(t, p.HTTP, time.Now().Add(time.Hour))
				// Each create follows the send of the one before, so the
				// relay's next poll by the clock is up to 5 s off.
				records := kafkatest.ReadTopic(t, kafkaAddr, "posting-events", i, 2*time.Second)
				require.Len(t, records, i, "post %v not on the topic within 2 s", post["id"])
				require.Equal(t, []string{"POSTING_EVENT"}, eventsOf(records, post["id"]))
			}
			p.Terminate(t)
		})
	}
}
