package e2e_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// `posting serve` killed with SIGKILL while 32 clients create posts, whose
// creates share transactions, loses no post it answered 201 for: each is
// stored RESERVED with its CREATED event, on MariaDB, PostgreSQL and SQLite.
// On PostgreSQL the posts carry fewer transaction ids than there are posts:
// the creates were grouped.
func TestServeKilledAmidGroupedCreatesKeepsEveryAnsweredPost(t *testing.T) {
	t.Parallel()
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL, database.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			dbURL := databasetest.URL(t, d, "group")
			b := kafkatest.Start(t)
			serve := postingtest.StartFreshServe(t, "POSTING_DATABASE_URL="+dbURL, "POSTING_KAFKA_BROKERS="+b.Addr,
				"POSTING_API_WRITE_RATE=off")
			var (
				mu       sync.Mutex
				answered []int64
				clients  sync.WaitGroup
			)
			stop := make(chan struct{})
			for range 32 {
				clients.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if id, ok := tryCreatePost(serve.HTTP, time.Now().Add(time.Hour)); ok {
							mu.Lock()
							answered = append(answered, id)
							mu.Unlock()
						}
					}
				})
			}
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(answered) >= 500
			}, 60*time.Second, 10*time.Millisecond, "500 creates answered")
			kill9(t, serve)
			close(stop)
			clients.Wait()

			db := databasetest.Open(t, dbURL)
			for _, id := range answered {
				var p reservation.Post
				require.NoError(t, db.Where("id = ?", id).Take(&p).Error, "post %d was answered 201", id)
				require.Equal(t, reservation.StatusReserved, p.Status)
				var events int64
				require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ? AND event_type = ?", id, "POSTING_EVENT").Count(&events).Error)
				require.EqualValues(t, 1, events, "the CREATED event of post %d", id)
			}
			if d == database.PostgreSQL {
				var posts, txs int64
				require.NoError(t, db.Raw("SELECT COUNT(*), COUNT(DISTINCT xmin::text) FROM posts").Row().Scan(&posts, &txs))
				require.Less(t, txs, posts, "grouped creates share transactions")
				t.Logf("%d posts in %d transactions, %d answered", posts, txs, len(answered))
			}
		})
	}
}
