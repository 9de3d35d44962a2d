package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay/relaytest"
)

// BenchmarkMarkSentAndClaim is the relay's database work per batch alone,
// as a pipelined relay does it: each full batch acknowledged with the
// claim of the next (MarkSentAndClaim on the database's clock), draining
// 10,000 seeded events (2,000 posts x 5) at batch 500. ms/claim is the
// time of one such transaction, the bound of a pipelined relay whose send
// is faster.
//
//	POSTING_TEST_REQUIRE_MYSQL=1 POSTING_TEST_REQUIRE_POSTGRES=1 \
//	  go test -run '^$' -bench BenchmarkMarkSentAndClaim -benchtime 3x ./outbox/
func BenchmarkMarkSentAndClaim(b *testing.B) {
	const events, batch = 10000, 500
	ctx := context.Background()
	for _, dialect := range databasetest.Dialects {
		b.Run(fmt.Sprintf("%s/batch=%d", dialect, batch), func(b *testing.B) {
			db := databasetest.New(b, dialect)
			store := outbox.NewStore(db)
			var total time.Duration
			claims := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				relaytest.Seed(b, db.DB, events/5, 5, time.Now().Add(-time.Second))
				if dialect == database.PostgreSQL {
					require.NoError(b, db.Exec("ANALYZE outbox").Error)
				}
				b.StartTimer()
				var held []outbox.Message
				sent := 0
				for {
					start := time.Now()
					next, fenced, err := store.MarkSentAndClaim(ctx, held, time.Now(), "bench", batch, time.Time{})
					total += time.Since(start)
					claims++
					require.NoError(b, err)
					require.Zero(b, fenced)
					sent += len(held)
					if len(next) == 0 {
						break
					}
					held = next
				}
				require.Equal(b, events, sent)
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(claims), "ms/claim")
			b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
		})
	}
}
