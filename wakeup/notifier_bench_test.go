package wakeup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/event/eventtest"
	"github.com/postingsvc/posting/outbox"
)

// BenchmarkWritersNotify measures what wake-ups cost writers on PostgreSQL:
// 8 writers commit 4,000 single-row outbox appends, first with NOTIFY run
// inside each writing transaction (as appends used to), then with the
// instance's Notifier sending it after the commits, coalesced; a listener
// hears both. It reports both durations and their ratio (inside / after);
// b.N is ignored (-benchtime=1x).
//
//	go test -run '^$' -bench WritersNotify -benchtime=1x ./wakeup/
func BenchmarkWritersNotify(b *testing.B) {
	const writers, commits = 8, 4000
	db := databasetest.NewPostgres(b)
	sqlDB, err := db.DB.DB()
	require.NoError(b, err)
	sqlDB.SetMaxOpenConns(writers + 2)
	sqlDB.SetMaxIdleConns(writers + 2)
	startListener(b, db, func() {})

	run := func(w *gorm.DB, inside bool) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range commits / writers {
					ev := eventtest.Outbox(b, event.PostingEvent, int64(g*commits+i+1), time.Now(), nil)
					err := database.Transaction(context.Background(), w, func(tx *gorm.DB) error {
						if _, err := outbox.Append(tx, ev); err != nil {
							return err
						}
						if inside {
							return tx.Exec("NOTIFY " + outbox.NotifyChannel).Error
						}
						return nil
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	insideTook := run(db.DB, true)
	afterTook := run(startNotifier(b, db), false)
	b.StopTimer()
	b.ReportMetric(insideTook.Seconds(), "inside_s")
	b.ReportMetric(afterTook.Seconds(), "after_s")
	b.ReportMetric(insideTook.Seconds()/afterTook.Seconds(), "ratio")
	b.Logf("%d writers, %d commits: NOTIFY inside the transaction %s, coalesced after the commit %s: %.2fx faster",
		writers, commits, insideTook.Round(time.Millisecond), afterTook.Round(time.Millisecond), insideTook.Seconds()/afterTook.Seconds())
}
