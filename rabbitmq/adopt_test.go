package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/rabbitmq"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/reservation"
	"github.com/postingsvc/posting/worker"
)

// kafkaEra writes the publication a Kafka worker would have recorded for p
// under partition, with status.
func kafkaEra(t *testing.T, db *gorm.DB, p *reservation.Post, partition int32, status worker.PublicationStatus) {
	t.Helper()
	now := database.Normalize(time.Now())
	pub := worker.Publication{PostID: p.ID, EventID: reservationMessage(t, p).EventID, PartitionID: partition,
		ScheduledAt: p.ScheduledAt, Status: status, CreatedAt: now, UpdatedAt: now}
	require.NoError(t, db.Create(&pub).Error)
}

// settledCounter counts the publications workers settled as PUBLISHED.
type settledCounter struct{ published atomic.Int64 }

func (s *settledCounter) observe(outcome string) {
	if outcome == worker.OutcomePublished {
		s.published.Add(1)
	}
}

// kafkaWorker is a worker as `posting worker` runs it on Kafka: a
// kafka.Consumer assigns it partitions and hands it events; here the test
// plays the consumer.
func kafkaWorker(t *testing.T, db *gorm.DB, pub worker.Publisher, settled *settledCounter, partitions ...int32) *worker.Worker {
	t.Helper()
	w, err := worker.New(db, worker.Config{Consumer: "posting-worker", Publisher: pub, Logger: slog.New(slog.DiscardHandler),
		RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, SweepInterval: 200 * time.Millisecond,
		ObserveSettled: settled.observe})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	require.NoError(t, w.Assigned(context.Background(), "posting-events", partitions))
	return w
}

// startAdopter is startMember with a short sweep and a settled counter.
func startAdopter(t *testing.T, db *gorm.DB, url, exchange, queue string, pub worker.Publisher, settled *settledCounter) *member {
	t.Helper()
	return startMemberWith(t, db, url, exchange, queue, worker.Config{Publisher: pub,
		SweepInterval: 200 * time.Millisecond, ObserveSettled: settled.observe})
}

// requirePublishedOnce checks that every post of posts is PUBLISHED, not
// before its time, with its publication PUBLISHED under partition 0 at the
// same instant.
func requirePublishedOnce(t *testing.T, db *gorm.DB, posts []*reservation.Post) {
	t.Helper()
	requirePublishedOnceUnder(t, db, posts, nil)
}

// requirePublishedOnceUnder is requirePublishedOnce where a publication may
// also have stayed under kafkaPartition[post]: a Kafka worker still running
// may publish it before the RabbitMQ worker adopts it.
func requirePublishedOnceUnder(t *testing.T, db *gorm.DB, posts []*reservation.Post, kafkaPartition map[int64]int32) {
	t.Helper()
	for _, p := range posts {
		got, err := reservation.LoadPost(db, p.ID)
		require.NoError(t, err)
		require.Equal(t, reservation.StatusPublished, got.Status, "post %d", p.ID)
		require.False(t, got.PublishedAt.Before(p.ScheduledAt), "post %d published early", p.ID)
		var pub worker.Publication
		require.NoError(t, db.First(&pub, "post_id = ?", p.ID).Error)
		require.Equal(t, worker.PublicationPublished, pub.Status, "post %d", p.ID)
		if k, ok := kafkaPartition[p.ID]; !ok || pub.PartitionID != k {
			require.Equal(t, rabbitmq.Partition, pub.PartitionID, "post %d", p.ID)
		}
		require.True(t, pub.PublishedAt.Equal(*got.PublishedAt), "post %d: publication and post disagree", p.ID)
		require.Equal(t, 1, pub.Attempts, "post %d: attempts", p.ID)
	}
}

// Two RabbitMQ workers start at once on a database the Kafka worker left
// with 200 PENDING publications over partitions 0..5, a quarter overdue,
// the rest due within 2 to 4 s, plus a FAILED and a CANCELLED one under
// partition 3. The active one is killed mid-way; the standby adopts what is
// left. Every post is published once, none early; the FAILED and CANCELLED
// rows keep their partition and status. The database records each
// publication once; only calls in flight at the kill may be made again.
func TestTwoWorkersAdoptManyKafkaPublications(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		const n = 200
		var posts []*reservation.Post
		for i := range n {
			at := time.Now().Add(2*time.Second + time.Duration(i%20)*100*time.Millisecond)
			if i%4 == 0 {
				at = time.Now().Add(-10 * time.Second)
			}
			p := insertWorking(t, db.DB, at)
			posts = append(posts, p)
			kafkaEra(t, db.DB, p, int32(i%6), worker.PublicationPending)
		}
		failed := insertWorking(t, db.DB, time.Now().Add(-time.Minute))
		kafkaEra(t, db.DB, failed, 3, worker.PublicationFailed)
		cancelled := insertWorking(t, db.DB, time.Now().Add(time.Second))
		require.NoError(t, db.DB.Model(cancelled).Update("status", reservation.StatusCancelled).Error)
		kafkaEra(t, db.DB, cancelled, 3, worker.PublicationCancelled)

		var pubs [2]recorder // each member's publisher calls
		settled := &settledCounter{}
		var members [2]*member
		var wg sync.WaitGroup
		for i := range members {
			wg.Go(func() { members[i] = startAdopter(t, db.DB, url, exchange, queue, &pubs[i], settled) })
		}
		wg.Wait()

		var active, standby *member
		require.Eventually(t, func() bool {
			for i, m := range members {
				if m.w.Pending() > 0 {
					active, standby = m, members[1-i]
					return true
				}
			}
			return false
		}, 30*time.Second, 5*time.Millisecond, "one worker adopted and armed")
		require.Eventually(t, func() bool { return publishedCount(t, db.DB) > 0 }, 30*time.Second, 5*time.Millisecond)
		require.Less(t, publishedCount(t, db.DB), int64(n), "killed mid-way")
		active.kill()
		require.Eventually(t, func() bool { return publishedCount(t, db.DB) == n }, time.Minute, 20*time.Millisecond,
			"the standby took over")
		_ = standby

		requirePublishedOnce(t, db.DB, posts)
		// Each worker calls the publisher once per post. A post both called
		// is one whose call was in flight when the active one died (called,
		// PUBLISHED not yet committed): the publisher is at least once, and
		// at most one slot's worth of calls can be in flight.
		calls := map[int64]int{}
		for i := range pubs {
			pubs[i].mu.Lock()
			require.Empty(t, pubs[i].early, "published before their time")
			for id, c := range pubs[i].calls {
				require.Equal(t, 1, c, "post %d published %d times by one worker", id, c)
				calls[id]++
			}
			pubs[i].mu.Unlock()
		}
		require.Len(t, calls, n)
		again := 0
		for _, c := range calls {
			if c > 1 {
				again++
			}
		}
		require.LessOrEqual(t, again, worker.DefaultConcurrency, "published again by the standby")
		require.EqualValues(t, n, settled.published.Load(), "publications settled PUBLISHED once each")

		for _, p := range []struct {
			post   *reservation.Post
			status worker.PublicationStatus
		}{{failed, worker.PublicationFailed}, {cancelled, worker.PublicationCancelled}} {
			var got worker.Publication
			require.NoError(t, db.DB.First(&got, "post_id = ?", p.post.ID).Error)
			require.Equal(t, p.status, got.Status)
			require.EqualValues(t, 3, got.PartitionID, "a settled publication is not adopted")
		}
		var post reservation.Post
		require.NoError(t, db.DB.First(&post, failed.ID).Error)
		require.Equal(t, reservation.StatusWorking, post.Status, "the FAILED post waits for an operator")
	})
}

// An operator starts the RabbitMQ worker without stopping the Kafka worker,
// which owns partitions 0..5 and has armed their publications. Both arm
// every adopted publication (the Kafka worker owns partition 0 too), and
// the database records each post once, none early; the publisher may be
// called twice for a post, with the same key.
func TestKafkaWorkerStillRunningWhileRabbitMQAdopts(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		const n = 60
		var posts []*reservation.Post
		partition := map[int64]int32{}
		for i := range n {
			p := insertWorking(t, db.DB, time.Now().Add(2*time.Second+time.Duration(i%10)*50*time.Millisecond))
			posts = append(posts, p)
			partition[p.ID] = int32(i % 6)
			kafkaEra(t, db.DB, p, partition[p.ID], worker.PublicationPending)
		}
		kafkaPub, rabbitPub := &keyRecorder{}, &keyRecorder{}
		settled := &settledCounter{}
		kw := kafkaWorker(t, db.DB, kafkaPub, settled, 0, 1, 2, 3, 4, 5)
		require.Equal(t, n, kw.Pending())
		startAdopter(t, db.DB, url, exchange, queue, rabbitPub, settled)

		require.Eventually(t, func() bool { return publishedCount(t, db.DB) == n }, time.Minute, 20*time.Millisecond)
		// Both workers let go of every timer: no later attempt.
		require.Eventually(t, func() bool { return kw.Pending() == 0 }, 30*time.Second, 20*time.Millisecond)
		requirePublishedOnceUnder(t, db.DB, posts, partition)
		require.EqualValues(t, n, settled.published.Load(), "publications settled PUBLISHED, over both workers")

		twice := 0
		for _, p := range posts {
			keys := append(kafkaPub.keys(p.ID), rabbitPub.keys(p.ID)...)
			require.NotEmpty(t, keys, "post %d", p.ID)
			var pub worker.Publication
			require.NoError(t, db.DB.First(&pub, "post_id = ?", p.ID).Error)
			for _, k := range keys {
				require.Equal(t, pub.EventID, k, "post %d: one key for every call", p.ID)
			}
			if len(keys) > 1 {
				twice++
			}
		}
		require.Empty(t, kafkaPub.early)
		require.Empty(t, rabbitPub.early)
		t.Logf("posts whose publisher was called by both workers: %d of %d", twice, n)
	})
}

// keyRecorder is a Publisher that notes the keys of the calls per post and
// any call before the post's time.
type keyRecorder struct {
	mu    sync.Mutex
	calls map[int64][]string
	early []int64
}

func (r *keyRecorder) Publish(_ context.Context, p worker.Publishing) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[int64][]string{}
	}
	r.calls[p.Post.ID] = append(r.calls[p.Post.ID], p.Key)
	if time.Now().Before(p.Post.ScheduledAt) {
		r.early = append(r.early, p.Post.ID)
	}
	return nil
}

func (r *keyRecorder) keys(id int64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls[id]...)
}

// flaky fails a post's first failures calls, then succeeds.
type flaky struct {
	failures int
	mu       sync.Mutex
	calls    map[int64]int
	ok       map[int64]int
}

func (f *flaky) Publish(_ context.Context, p worker.Publishing) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls, f.ok = map[int64]int{}, map[int64]int{}
	}
	f.calls[p.Post.ID]++
	if f.calls[p.Post.ID] <= f.failures {
		return errors.New("webhook down")
	}
	f.ok[p.Post.ID]++
	return nil
}

// A Kafka worker still retrying an overdue publication of partition 3 (its
// publisher fails three times) when the RabbitMQ worker adopts it: the
// post is recorded once and the publication is settled PUBLISHED.
func TestAdoptionRacesARetriedPublication(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		p := insertWorking(t, db.DB, time.Now().Add(-time.Second))
		kafkaEra(t, db.DB, p, 3, worker.PublicationPending)
		kafkaPub := &flaky{failures: 3}
		settled := &settledCounter{}
		kafkaWorker(t, db.DB, kafkaPub, settled, 3)
		require.Eventually(t, func() bool {
			kafkaPub.mu.Lock()
			defer kafkaPub.mu.Unlock()
			return kafkaPub.calls[p.ID] >= 1
		}, 30*time.Second, 5*time.Millisecond, "the Kafka worker is retrying")
		rabbitPub := &flaky{failures: 2}
		startAdopter(t, db.DB, url, exchange, queue, rabbitPub, settled)
		require.Eventually(t, func() bool { return publishedCount(t, db.DB) == 1 }, time.Minute, 20*time.Millisecond)
		got, err := reservation.LoadPost(db.DB, p.ID)
		require.NoError(t, err)
		var pub worker.Publication
		require.NoError(t, db.DB.First(&pub, "post_id = ?", p.ID).Error)
		require.Equal(t, worker.PublicationPublished, pub.Status)
		require.True(t, pub.PublishedAt.Equal(*got.PublishedAt))
		require.EqualValues(t, 1, settled.published.Load())
	})
}

// The operator starts the RabbitMQ worker first and lets the Kafka worker
// drain its topic before stopping it (no downtime). The Kafka worker
// handles one more reservation after the adoption: its publication is
// recorded under partition 3, and the Kafka worker is then stopped. The
// RabbitMQ worker must still publish that post.
func TestPublicationRecordedUnderKafkaAfterAdoptionIsPublished(t *testing.T) {
	t.Parallel()
	url := rabbitmqtest.URL(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		exchange, queue := workerNames(t, url)
		rabbitPub, kafkaPub := &recorder{}, &recorder{}
		settled := &settledCounter{}
		m := startAdopter(t, db.DB, url, exchange, queue, rabbitPub, settled)
		// The RabbitMQ worker is the active consumer (it adopted nothing).
		probe := insertWorking(t, db.DB, time.Now().Add(time.Hour))
		for _, err := range newSender(t, url, exchange).Send(context.Background(), []outbox.Message{reservationMessage(t, probe)}) {
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return m.w.Pending() == 1 }, 30*time.Second, 10*time.Millisecond)

		kw := kafkaWorker(t, db.DB, kafkaPub, settled, 3)
		p := insertWorking(t, db.DB, time.Now().Add(3*time.Second))
		msg := reservationMessage(t, p)
		ev, err := inbox.Decode([]byte(event.Key(p.ID)),
			map[string]string{event.HeaderEventID: msg.EventID, event.HeaderEventType: msg.EventType}, []byte(msg.Payload))
		require.NoError(t, err)
		ev.Topic, ev.Partition, ev.Offset = "posting-events", 3, 41
		require.NoError(t, kw.Handle(context.Background(), ev))
		require.Equal(t, 1, kw.Pending())
		kw.Revoked("posting-events", []int32{3})
		kw.Stop()

		require.Eventually(t, func() bool { return publishedCount(t, db.DB) == 1 }, 30*time.Second, 20*time.Millisecond,
			"the post the Kafka worker scheduled last is published")
		requirePublishedOnce(t, db.DB, []*reservation.Post{p})
		rabbitPub.mu.Lock()
		defer rabbitPub.mu.Unlock()
		require.Equal(t, map[int64]int{p.ID: 1}, rabbitPub.calls)
		require.Empty(t, rabbitPub.early)
	})
}

// Only a worker that adopted adopts in its sweep: a Kafka worker's sweep
// leaves the publications of partitions it does not own where they are.
func TestKafkaWorkerSweepDoesNotAdopt(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	p := insertWorking(t, db.DB, time.Now().Add(time.Hour))
	kafkaEra(t, db.DB, p, 2, worker.PublicationPending)
	kw := kafkaWorker(t, db.DB, &recorder{}, &settledCounter{}, 1)
	_, err := kw.Sweep(context.Background())
	require.NoError(t, err)
	var got worker.Publication
	require.NoError(t, db.DB.First(&got, "post_id = ?", p.ID).Error)
	require.EqualValues(t, 2, got.PartitionID)
	require.Zero(t, kw.Pending())
}
