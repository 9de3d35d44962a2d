package wakeup

import (
	"context"
	"sync"
	"sync/atomic"
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

// Requests made while a send is under way make one more send, not one each:
// a burst of commits costs the database one NOTIFY per window, and Notify
// never waits for the database.
func TestNotifierCoalescesRequestsIntoOneSend(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	started, release := make(chan struct{}, 10), make(chan struct{})
	n, err := NewNotifier(NotifierConfig{Window: time.Millisecond, Send: func(context.Context) error {
		sends.Add(1)
		started <- struct{}{}
		<-release
		return nil
	}})
	require.NoError(t, err)
	done := make(chan struct{}, 10)
	n.sent = func(error) { done <- struct{}{} }
	require.NoError(t, n.Start(context.Background()))

	n.Notify()
	waitFor(t, started, "the first send")
	for range 100 {
		n.Notify() // while the first send holds: none of these blocks
	}
	close(release)
	waitFor(t, done, "the first send's end")
	waitFor(t, started, "the coalesced send")
	waitFor(t, done, "the coalesced send's end")
	n.Stop()
	require.Equal(t, int32(2), sends.Load(), "101 requests, one of them during a send")
}

func TestNotifierConfigLimits(t *testing.T) {
	t.Parallel()
	send := func(context.Context) error { return nil }
	for _, c := range []NotifierConfig{{}, {Send: send, Window: time.Microsecond}, {Send: send, Window: 2 * time.Second}} {
		_, err := NewNotifier(c)
		require.Error(t, err, "%+v", c)
	}
	n, err := NewNotifier(NotifierConfig{Send: send})
	require.NoError(t, err)
	require.Equal(t, DefaultNotifyWindow, n.cfg.Window)
}

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
