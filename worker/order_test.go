package worker_test

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
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/worker"
)

// withSequence is r as the relay sends the outbox row with id seq: the
// sequence in its value and its ce_sequence header.
func withSequence(r kafkatest.Record, seq int64) kafkatest.Record {
	r.Value = event.WithSequence(r.Value, seq)
	r.Headers[event.CloudEventsKafkaPrefix+event.CloudEventsSequence] = event.FormatSequence(seq)
	return r
}

// An event that arrives after a later one of its post (a send that got no
// answer landing late, a broker that stalled) is older news: the worker
// drops it, counts it, and its effect never happens. Here a reservation
// overtaken by the post's cancellation would otherwise arm a publication.
func TestWorkerDropsAnEventOlderThanOneApplied(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		var mu sync.Mutex
		outcomes := map[string]int{}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			ObserveConsumed: func(_, o string) { mu.Lock(); outcomes[o]++; mu.Unlock() }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		post := insertWorking(t, db.DB, time.Now().Add(time.Hour))
		reservationEv := withSequence(reservationRecord(t, post), 10)
		cancelEv := withSequence(cancelRecord(t, post), 11)
		require.NoError(t, w.Handle(ctx, decode(t, cancelEv, 0)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationEv, 0)))

		var n int64
		require.NoError(t, db.DB.Model(&worker.Publication{}).Where("post_id = ?", post.ID).Count(&n).Error)
		require.Zero(t, n, "the overtaken reservation scheduled a publication")
		require.Zero(t, w.Pending())
		mu.Lock()
		require.Equal(t, map[string]int{worker.OutcomeProcessed: 1, worker.OutcomeOutOfOrder: 1}, outcomes)
		mu.Unlock()

		// Without a sequence (a producer that predates it) an event is
		// applied as before.
		old := insertWorking(t, db.DB, time.Now().Add(time.Hour))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, old), 0)))
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, old.ID).Status)
		requireNoSequenceRow(t, db.DB, old.ID)
	})
}

func requireNoSequenceRow(t *testing.T, db *gorm.DB, postID int64) {
	t.Helper()
	var n int64
	require.NoError(t, db.Table("inbox_sequences").Where("post_id = ?", postID).Count(&n).Error)
	require.Zero(t, n)
}
