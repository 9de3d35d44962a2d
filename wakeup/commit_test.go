package wakeup_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/kafka"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
	"github.com/postingsvc/posting/reservation"
)

// A post created through the service, whose db was wired with the local
// relay's Wake (as serve does), is on the topic long before the relay's
// default 5 s interval would have polled: the commit woke the relay. On
// every dialect, with no LISTEN anywhere.
func TestServiceCommitWakesLocalRelay(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		broker := kafkatest.Start(t)
		producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic},
			slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(func() { _ = producer.Close() })
		var polls atomic.Int32
		r, err := relay.New(outbox.NewStore(db), producer, relay.Config{InstanceID: "local",
			Logger: slog.New(slog.DiscardHandler), Observe: func(relay.Result, time.Duration, error) { polls.Add(1) }})
		require.NoError(t, err)
		require.Equal(t, 5*time.Second, r.Config().Interval, "the default interval")
		require.NoError(t, r.Start(context.Background()))
		t.Cleanup(r.Stop)
		// The first poll (at start) is done: the next one by the clock is
		// 5 s away.
		require.Eventually(t, func() bool { return polls.Load() >= 1 }, 10*time.Second, 5*time.Millisecond)

		posts, err := reservation.NewService(database.WithCommitWaker(db.DB, r.Wake), reservation.ServiceConfig{})
		require.NoError(t, err)
		const n = 3
		for i := range n {
			p, err := posts.Create(context.Background(), reservation.CreateInput{Title: "wake", Content: "on commit",
				ScheduledAt: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			// Well inside the interval; each create comes right after the
			// poll that sent the one before, so a poll by the clock is ~5 s off.
			require.Eventually(t, func() bool {
				var m outbox.Message
				require.NoError(t, db.Where("aggregate_id = ?", p.ID).First(&m).Error)
				return m.Status == outbox.StatusSent
			}, 2*time.Second, 5*time.Millisecond, "event %d of post %d not sent within 2 s", i, p.ID)
		}
		recs := broker.Records(t, n, 10*time.Second)
		require.Len(t, recs, n)
	})
}
