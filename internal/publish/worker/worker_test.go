package worker_test

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// tally counts the outcomes a worker reports from its goroutines (its
// ObserveConsumed or ObserveSettled).
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) add(outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[outcome]++
}

// consumed is add as an ObserveConsumed.
func (c *tally) consumed(_, outcome string) { c.add(outcome) }

func (c *tally) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// recorder is a Publisher that counts calls per post.
type recorder struct {
	mu    sync.Mutex
	calls map[int64]int
	keys  map[int64]string
}

func (r *recorder) Publish(_ context.Context, p worker.Publishing) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls, r.keys = map[int64]int{}, map[int64]string{}
	}
	r.calls[p.Post.ID]++
	r.keys[p.Post.ID] = p.Key
	return nil
}

func (r *recorder) count(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		n += c
	}
	return n
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newWorker(t *testing.T, db *gorm.DB, pub worker.Publisher) *worker.Worker {
	t.Helper()
	w, err := worker.New(db, worker.Config{Publisher: pub, Logger: quiet(), RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

// message builds the Kafka record of an event about post, as the relay sends it.
func message(t *testing.T, typ event.Type, post *reservation.Post, fields any) kafkatest.Record {
	t.Helper()
	m, err := outbox.NewMessage(reservationtest.Outbox(t, typ, post.ID, time.Now(), fields))
	require.NoError(t, err)
	return kafkatest.Record{Key: m.Key(), Value: []byte(m.Payload),
		Headers: map[string]string{event.HeaderEventID: m.EventID, event.HeaderEventType: string(m.EventType)}}
}

func reservationRecord(t *testing.T, post *reservation.Post) kafkatest.Record {
	return message(t, event.ReservationEvent, post, event.ReservationEventFields{ScheduledAt: post.ScheduledAt})
}

func cancelRecord(t *testing.T, post *reservation.Post) kafkatest.Record {
	return message(t, event.PostingEvent, post, event.PostingEventFields{
		Action: event.ActionCancelled, Status: string(reservation.StatusCancelled), ScheduledAt: post.ScheduledAt})
}

// decode turns a record into the event the consumer would hand over.
func decode(t *testing.T, r kafkatest.Record, partition int32) inbox.Event {
	t.Helper()
	ev, err := inbox.Decode([]byte(r.Key), r.Headers, r.Value)
	require.NoError(t, err)
	ev.Topic, ev.Partition = "posting-events", partition
	return ev
}

func loadPost(t *testing.T, db *gorm.DB, id int64) *reservation.Post {
	t.Helper()
	p, err := reservation.LoadPost(db, id)
	require.NoError(t, err)
	return p
}

// awaitPublished waits until every post of posts is PUBLISHED.
func awaitPublished(t *testing.T, db *gorm.DB, posts ...*reservation.Post) {
	t.Helper()
	for _, p := range posts {
		require.Eventually(t, func() bool { return loadPost(t, db, p.ID).Status == reservation.StatusPublished },
			30*time.Second, 20*time.Millisecond, "post %d not published", p.ID)
	}
}

func loadPublication(t *testing.T, db *gorm.DB, id int64) worker.Publication {
	t.Helper()
	return databasetest.Load[worker.Publication](t, db, id)
}

// A reservation is published at its time, not before, once, with the time
// recorded on the post and the publication; handing the worker the same
// event again changes nothing.
func TestWorkerPublishesAtItsTimeOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		var outcomes tally
		var mu sync.Mutex
		var lags []time.Duration
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), ObserveConsumed: outcomes.consumed,
			ObservePublished: func(lag time.Duration) { mu.Lock(); lags = append(lags, lag); mu.Unlock() }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)

		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(3*time.Second))
		rec := reservationRecord(t, post)
		ctx := context.Background()
		require.NoError(t, w.Handle(ctx, decode(t, rec, 3)))
		require.NoError(t, w.Handle(ctx, decode(t, rec, 3)))
		require.Equal(t, 1, w.Pending())
		p := loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPending, p.Status)
		require.EqualValues(t, 3, p.PartitionID)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, post.ID).Status, "published early")

		awaitPublished(t, db.DB, post)
		got := loadPost(t, db.DB, post.ID)
		require.NotNil(t, got.PublishedAt)
		require.False(t, got.PublishedAt.Before(post.ScheduledAt), "published at %s, before %s", got.PublishedAt, post.ScheduledAt)
		p = loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.True(t, p.PublishedAt.Equal(*got.PublishedAt))
		require.Equal(t, 1, pub.count(post.ID))
		require.Equal(t, rec.Headers[event.HeaderEventID], pub.keys[post.ID])
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 5*time.Second, 10*time.Millisecond)

		// A redelivery after the publication, and a stray timer, change nothing.
		require.NoError(t, w.Handle(ctx, decode(t, rec, 3)))
		status, err := w.PublishDue(ctx, post.ID)
		require.NoError(t, err)
		require.Equal(t, worker.PublicationPublished, status)
		require.Equal(t, 1, pub.count(post.ID))
		require.Equal(t, map[string]int{worker.OutcomeProcessed: 1, worker.OutcomeDuplicate: 2}, outcomes.counts())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, lags, 1)
		require.GreaterOrEqual(t, lags[0], time.Duration(0))
	})
}

// A post cancelled between WORKING and its time stays CANCELLED, whether the
// worker hears of the cancel event first or finds the post cancelled when the
// time comes.
func TestWorkerCancelledPostIsNotPublished(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		w := newWorker(t, db.DB, pub)
		ctx := context.Background()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)

		heard := reservationtest.InsertWorking(t, db.DB, time.Now().Add(3*time.Second))
		silent := reservationtest.InsertWorking(t, db.DB, time.Now().Add(3*time.Second))
		for _, p := range []*reservation.Post{heard, silent} {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
			_, err := svc.Cancel(ctx, p.ID)
			require.NoError(t, err)
		}
		// The cancellation as the relay sends it: a row of the outbox.
		require.NoError(t, w.Handle(ctx, decode(t, written(t, db.DB, cancelRecord(t, heard)), 0)))
		require.Equal(t, worker.PublicationCancelled, loadPublication(t, db.DB, heard.ID).Status)

		require.Eventually(t, func() bool {
			return loadPublication(t, db.DB, silent.ID).Status == worker.PublicationCancelled
		}, 10*time.Second, 20*time.Millisecond)
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 5*time.Second, 10*time.Millisecond)
		for _, p := range []*reservation.Post{heard, silent} {
			require.Equal(t, reservation.StatusCancelled, loadPost(t, db.DB, p.ID).Status)
			require.Nil(t, loadPost(t, db.DB, p.ID).PublishedAt)
		}
		require.Zero(t, pub.total())
	})
}

// Timers do not outlive their partition: a worker that loses the partition
// (or stops) before the time publishes nothing, and the worker that is
// assigned the partition next publishes the post, once.
func TestWorkerRearmsPendingOnAssignment(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		ctx := context.Background()
		w1 := newWorker(t, db.DB, pub)
		onFive := reservationtest.InsertWorking(t, db.DB, time.Now().Add(3*time.Second))
		onSix := reservationtest.InsertWorking(t, db.DB, time.Now().Add(3*time.Second))
		require.NoError(t, w1.Handle(ctx, decode(t, reservationRecord(t, onFive), 5)))
		require.NoError(t, w1.Handle(ctx, decode(t, reservationRecord(t, onSix), 6)))
		w1.Revoked("posting-events", []int32{5})
		require.Equal(t, 1, w1.Pending(), "partition 6 stays armed")
		w1.Stop()
		require.Zero(t, w1.Pending())

		w2 := newWorker(t, db.DB, pub)
		require.NoError(t, w2.Assigned(ctx, "posting-events", []int32{5}))
		require.Equal(t, 1, w2.Pending())
		awaitPublished(t, db.DB, onFive)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, onSix.ID).Status, "partition 6 is nobody's")
		require.NoError(t, w2.Assigned(ctx, "posting-events", []int32{6}))
		awaitPublished(t, db.DB, onSix)
		require.Equal(t, 1, pub.count(onFive.ID))
		require.Equal(t, 1, pub.count(onSix.ID))
	})
}

// The webhook publisher POSTs the post as the API shows it, with the
// publication's key, and retries a 5xx; a 4xx is a refusal that leaves the
// post WORKING and the publication FAILED with the answer.
func TestWorkerWebhook(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var (
			mu       sync.Mutex
			requests []*http.Request
			bodies   []map[string]any
			answers  = []int{http.StatusServiceUnavailable, http.StatusOK}
			refuse   atomic.Bool
		)
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			raw, _ := io.ReadAll(r.Body)
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			requests, bodies = append(requests, r), append(bodies, body)
			if refuse.Load() {
				// Multi-byte characters, cut somewhere by the worker.
				http.Error(rw, "kanal ikke funnet: "+strings.Repeat("ø", 400), http.StatusUnprocessableEntity)
				return
			}
			code := answers[0]
			if len(answers) > 1 {
				answers = answers[1:]
			}
			rw.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		hook, err := worker.NewWebhook(worker.WebhookConfig{URL: srv.URL})
		require.NoError(t, err)
		w := newWorker(t, db.DB, hook)
		ctx := context.Background()

		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second)) // overdue: at once
		rec := reservationRecord(t, post)
		require.NoError(t, w.Handle(ctx, decode(t, rec, 0)))
		awaitPublished(t, db.DB, post)
		mu.Lock()
		require.Len(t, requests, 2, "a 503, then a 200")
		require.Equal(t, rec.Headers[event.HeaderEventID], requests[1].Header.Get("Idempotency-Key"))
		require.Equal(t, "application/json", requests[1].Header.Get("Content-Type"))
		require.Equal(t, float64(post.ID), bodies[1]["id"])
		require.Equal(t, "PUBLISHED", bodies[1]["status"])
		require.Equal(t, reservation.FormatJSONTime(*loadPost(t, db.DB, post.ID).PublishedAt), bodies[1]["publishedAt"])
		mu.Unlock()

		refuse.Store(true)
		refused := reservationtest.InsertWorking(t, db.DB, time.Now())
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, refused), 0)))
		require.Eventually(t, func() bool { return loadPublication(t, db.DB, refused.ID).Status == worker.PublicationFailed },
			10*time.Second, 20*time.Millisecond)
		p := loadPublication(t, db.DB, refused.ID)
		require.Contains(t, *p.LastError, "422")
		require.Contains(t, *p.LastError, "kanal ikke funnet: øøø")
		require.Equal(t, 1, p.Attempts)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, refused.ID).Status)
		mu.Lock()
		require.Len(t, requests, 3, "a refusal is not retried")
		mu.Unlock()
	})
	for _, cfg := range []worker.WebhookConfig{{}, {URL: "ftp://x"}, {URL: "http://"}, {URL: "http://x", Timeout: time.Hour}} {
		_, err := worker.NewWebhook(cfg)
		require.ErrorContains(t, err, "invalid webhook config", "%+v", cfg)
	}
}

// blocking is a Publisher whose calls for one post block until their
// context ends; it fails every call for another post; the rest succeed.
type blocking struct {
	recorder
	block, fail int64
	entered     chan struct{}
}

func (b *blocking) Publish(ctx context.Context, p worker.Publishing) error {
	switch p.Post.ID {
	case b.block:
		b.entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	case b.fail:
		return errors.New("receiver down for this post")
	}
	return b.recorder.Publish(ctx, p)
}

// Revoking a partition stops a publication in progress and leaves it
// PENDING for the next owner; a post that keeps failing does not hold the
// only publication slot, so others are published meanwhile.
func TestWorkerRevokeDuringPublishAndFailingPosts(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		blocked := reservationtest.InsertWorking(t, db.DB, time.Now())
		failing := reservationtest.InsertWorking(t, db.DB, time.Now())
		pub := &blocking{block: blocked.ID, fail: failing.ID, entered: make(chan struct{}, 1)}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), Concurrency: 1,
			RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(w.Stop)

		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, blocked), 1)))
		select {
		case <-pub.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the publication never started")
		}
		w.Revoked("posting-events", []int32{1}) // returns once the publication stopped
		require.Zero(t, w.Pending())
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, blocked.ID).Status)
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, blocked.ID).Status)

		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, failing), 2)))
		later := reservationtest.InsertWorking(t, db.DB, time.Now())
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, later), 2)))
		require.Eventually(t, func() bool { return loadPost(t, db.DB, later.ID).Status == reservation.StatusPublished },
			10*time.Second, 20*time.Millisecond, "a failing post starves the others")
		require.Eventually(t, func() bool { return loadPublication(t, db.DB, failing.ID).Attempts >= 2 },
			10*time.Second, 20*time.Millisecond)
		p := loadPublication(t, db.DB, failing.ID)
		require.Equal(t, worker.PublicationPending, p.Status, "a passing failure is tried again")
		require.Contains(t, *p.LastError, "receiver down")
	})
}

// killOnce wraps a handler: after the first event it handled (its database
// work committed), it kills the consumer before the offset can be marked.
type killOnce struct {
	inner inbox.Handler
	kill  func()
	done  atomic.Bool
}

func (k *killOnce) Handle(ctx context.Context, ev inbox.Event) error {
	if err := k.inner.Handle(ctx, ev); err != nil || k.done.Swap(true) {
		return err
	}
	k.kill()
	<-ctx.Done()
	return ctx.Err()
}

func startWorker(t *testing.T, b *kafkatest.Broker, db *gorm.DB, pub worker.Publisher, wrap func(inbox.Handler) inbox.Handler) (*kafka.Consumer, *worker.Worker) {
	t.Helper()
	w := newWorker(t, db, pub)
	var h inbox.Handler = w
	if wrap != nil {
		h = wrap(w)
	}
	c, err := kafka.NewConsumer(kafka.ConsumerConfig{Brokers: []string{b.Addr}, GroupID: "worker-test",
		CommitInterval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond}, h, quiet())
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	return c, w
}

// Through the in-process broker: a worker killed after its database commit
// and before its offset commit does not publish twice after a restart; a
// malformed message between two good ones is skipped and both good ones are
// processed.
func TestWorkerThroughKafkaKilledBeforeOffsetCommit(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := kafkatest.Start(t)
		pub := &recorder{}
		first := reservationtest.InsertWorking(t, db.DB, time.Now().Add(6*time.Second))
		second := reservationtest.InsertWorking(t, db.DB, time.Now().Add(6*time.Second))
		rec := reservationRecord(t, first)
		b.Produce(t, rec)

		var c1 *kafka.Consumer
		var w1 *worker.Worker
		killed := make(chan struct{})
		c1, w1 = startWorker(t, b, db.DB, pub, func(h inbox.Handler) inbox.Handler {
			return &killOnce{inner: h, kill: func() { close(killed) }}
		})
		select {
		case <-killed:
		case <-time.After(20 * time.Second):
			t.Fatal("the first worker never handled the event")
		}
		// The process dies: its timers and its session go, the offset was
		// never marked.
		w1.Stop()
		c1.Stop()
		seen, err := inbox.Processed(context.Background(), db.DB, worker.DefaultConsumer, rec.Headers[event.HeaderEventID])
		require.NoError(t, err)
		require.True(t, seen, "the database work committed before the kill")
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, first.ID).Status,
			"the first worker published before it was killed; the restart is not tested")

		b.Produce(t, kafkatest.Record{Key: rec.Key, Value: []byte(`{"eventId":`), Headers: rec.Headers}, reservationRecord(t, second))
		startWorker(t, b, db.DB, pub, nil)
		awaitPublished(t, db.DB, first, second)
		require.Equal(t, 1, pub.count(first.ID))
		require.Equal(t, 1, pub.count(second.ID))
		require.EqualValues(t, 2, databasetest.Count[inbox.Record](t, db.DB))
	})
}

// Through the in-process broker: the database refuses the writes of the
// first batch (and of the events handled one at a time after it) until it
// comes back; then every event is recorded once, in its order (the post
// reserved and cancelled in that batch stays cancelled), and every other
// post is published once.
func TestWorkerThroughKafkaDatabaseDownDuringABatchLosesNothing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := kafkatest.Start(t)
		pub := &recorder{}
		posts, recs := reservedPosts(t, db.DB, 20, time.Now().Add(5*time.Second))
		cancelled := posts[7]
		cancelInTable(t, db.DB, cancelled.ID)
		recs = append(recs, cancelRecord(t, cancelled))
		var down atomic.Bool
		var refused atomic.Int64
		down.Store(true)
		databasetest.Fail(t, db.DB, databasetest.StmtCreate, driver.ErrBadConn, func(*gorm.DB) bool {
			if !down.Load() {
				return false
			}
			refused.Add(1)
			return true
		})
		b.Produce(t, recs...)
		startWorker(t, b, db.DB, pub, nil)
		require.Eventually(t, func() bool { return refused.Load() >= 5 }, 20*time.Second, 10*time.Millisecond,
			"the batch and its first event retried")
		require.Zero(t, databasetest.Count[inbox.Record](t, db.DB), "nothing recorded while the database refused")
		down.Store(false)

		require.Eventually(t, func() bool {
			return reservationtest.Count(t, db.DB, reservation.StatusPublished) == int64(len(posts)-1)
		}, 30*time.Second, 20*time.Millisecond)
		require.EqualValues(t, len(recs), databasetest.Count[inbox.Record](t, db.DB), "every event recorded once")
		require.Equal(t, worker.PublicationCancelled, loadPublication(t, db.DB, cancelled.ID).Status,
			"the cancellation applied after its reservation")
		for _, p := range posts {
			want := 1
			if p.ID == cancelled.ID {
				want = 0
			}
			require.Equal(t, want, pub.count(p.ID), "post %d", p.ID)
		}
	})
}

// cancelInTable cancels the post in the posts table only, as the service
// does before its CANCELLED event exists: the worker settles a publication
// CANCELLED only for a post the table says is.
func cancelInTable(t *testing.T, db *gorm.DB, id int64) {
	t.Helper()
	require.NoError(t, db.Exec("UPDATE posts SET status = ?, version = version + 1 WHERE id = ?", reservation.StatusCancelled, id).Error)
}

// reservedPosts inserts n WORKING posts due at at and returns them with
// their reservation records, in the same order.
func reservedPosts(t *testing.T, db *gorm.DB, n int, at time.Time) ([]*reservation.Post, []kafkatest.Record) {
	t.Helper()
	var posts []*reservation.Post
	var recs []kafkatest.Record
	for range n {
		p := reservationtest.InsertWorking(t, db, at)
		posts = append(posts, p)
		recs = append(recs, reservationRecord(t, p))
	}
	return posts, recs
}

// A real rebalance: events consumed by one worker, a second worker joins
// the group (the partitions are split), then the first leaves (the second
// takes them all), all before the posts are due. Every post is published
// once, by whichever worker holds its partition at its time.
func TestWorkerPublicationsFollowPartitionsAcrossRebalances(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		b := kafkatest.Start(t)
		pub := &recorder{}
		posts, recs := reservedPosts(t, db.DB, 24, time.Now().Add(20*time.Second))
		b.Produce(t, recs...)
		start := time.Now()
		c1, w1 := startWorker(t, b, db.DB, pub, nil)
		require.Eventually(t, func() bool { return w1.Pending() == len(posts) }, 20*time.Second, 20*time.Millisecond)
		t.Logf("first worker holds all %d after %s", len(posts), time.Since(start).Round(time.Millisecond))

		_, w2 := startWorker(t, b, db.DB, pub, nil)
		require.Eventually(t, func() bool { return w2.Pending() > 0 && w1.Pending() > 0 && w1.Pending()+w2.Pending() == len(posts) },
			20*time.Second, 20*time.Millisecond, "the second member never got partitions")
		t.Logf("split %d/%d after %s", w1.Pending(), w2.Pending(), time.Since(start).Round(time.Millisecond))
		c1.Stop()
		w1.Stop()
		require.Eventually(t, func() bool { return w2.Pending() == len(posts) }, 20*time.Second, 20*time.Millisecond)
		t.Logf("second worker holds all after %s", time.Since(start).Round(time.Millisecond))
		for _, p := range posts {
			require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, p.ID).Status, "published before its time")
		}

		require.Eventually(t, func() bool {
			return reservationtest.Count(t, db.DB, reservation.StatusPublished) == int64(len(posts))
		}, 30*time.Second, 20*time.Millisecond)
		for _, p := range posts {
			require.Equal(t, 1, pub.count(p.ID), "post %d", p.ID)
		}
	})
}

// A batch is recorded in one go, in its order: a reservation followed by
// the post's cancellation leaves the publication CANCELLED and no timer, a
// reservation alone a PENDING publication with its timer, and a malformed
// reservation (no scheduledAt) is reported and not recorded. The same batch
// delivered again changes nothing.
func TestWorkerHandleBatchRecordsInOrderOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		w := newWorker(t, db.DB, &recorder{})
		ctx := context.Background()
		kept := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		cancelled := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		cancelInTable(t, db.DB, cancelled.ID)
		bad := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		evs := []inbox.Event{
			decode(t, reservationRecord(t, kept), 0),
			decode(t, reservationRecord(t, cancelled), 0),
			decode(t, cancelRecord(t, cancelled), 0),
			decode(t, message(t, event.ReservationEvent, bad, event.ReservationEventFields{}), 0),
		}
		check := func() {
			t.Helper()
			require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, kept.ID).Status)
			require.Equal(t, worker.PublicationCancelled, loadPublication(t, db.DB, cancelled.ID).Status)
			require.EqualValues(t, 2, databasetest.Count[worker.Publication](t, db.DB), "the malformed reservation scheduled nothing")
			require.EqualValues(t, 3, databasetest.Count[inbox.Record](t, db.DB))
			require.Equal(t, 1, w.Pending(), "only the kept post has a timer")
		}
		malformed, err := w.HandleBatch(ctx, evs)
		require.NoError(t, err)
		require.Len(t, malformed, len(evs))
		require.NoError(t, malformed[0])
		require.NoError(t, malformed[2])
		require.ErrorIs(t, malformed[3], inbox.ErrMalformed)
		check()

		malformed, err = w.HandleBatch(ctx, evs) // redelivered
		require.NoError(t, err)
		require.ErrorIs(t, malformed[3], inbox.ErrMalformed)
		check()
	})
}

// A reservation whose scheduledAt no database can store (a UTC year outside
// 1..9999: year 0, or 9999-12-31 at an offset that carries it into 10000) is
// malformed on every database: skipped, not retried for ever behind the
// events of its partition or queue, and nothing is recorded for it.
func TestWorkerRefusesAScheduledAtNoDatabaseCanStore(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		w := newWorker(t, db.DB, &recorder{})
		ctx := context.Background()
		for _, at := range []time.Time{
			time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -23*3600)),
		} {
			post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
			ev := decode(t, message(t, event.ReservationEvent, post, event.ReservationEventFields{ScheduledAt: at}), 0)
			require.ErrorIs(t, w.Handle(ctx, ev), inbox.ErrMalformed, "%s", at)
			malformed, err := w.HandleBatch(ctx, []inbox.Event{ev})
			require.NoError(t, err, "%s", at)
			require.ErrorIs(t, malformed[0], inbox.ErrMalformed, "%s", at)
		}
		require.Zero(t, databasetest.Count[worker.Publication](t, db.DB))
		require.Zero(t, w.Pending())
	})
}

// withSequence is r as the relay sends the outbox row with id seq: the
// sequence in its value and its ce_sequence header.
func withSequence(r kafkatest.Record, seq int64) kafkatest.Record {
	r.Value = event.WithSequence(r.Value, seq)
	r.Headers[event.CloudEventsKafkaPrefix+event.CloudEventsSequence] = event.FormatSequence(seq)
	return r
}

// written writes r's event in the outbox, as the service does with the
// change it announces, and returns r as the relay sends that row: with the
// row's id as its sequence.
func written(t *testing.T, db *gorm.DB, r kafkatest.Record) kafkatest.Record {
	t.Helper()
	var env event.Envelope
	require.NoError(t, json.Unmarshal(r.Value, &env))
	m, err := outbox.Append(db, outbox.Event{ID: env.EventID, Type: string(env.EventType), AggregateID: env.PostID,
		OccurredAt: env.OccurredAt, Payload: r.Value})
	require.NoError(t, err)
	return withSequence(r, m.ID)
}

// An event that arrives after a later one of its post (a send that got no
// answer landing late, a broker that stalled) is older news: the worker
// drops it, counts it, and its effect never happens. Here a reservation
// overtaken by the post's cancellation would otherwise arm a publication.
func TestWorkerDropsAnEventOlderThanOneApplied(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &recorder{}
		var outcomes tally
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), ObserveConsumed: outcomes.consumed})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
		reservationEv := written(t, db.DB, reservationRecord(t, post))
		cancelInTable(t, db.DB, post.ID)
		cancelEv := written(t, db.DB, cancelRecord(t, post))
		require.NoError(t, w.Handle(ctx, decode(t, cancelEv, 0)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationEv, 0)))

		var n int64
		require.NoError(t, db.DB.Model(&worker.Publication{}).Where("post_id = ?", post.ID).Count(&n).Error)
		require.Zero(t, n, "the overtaken reservation scheduled a publication")
		require.Zero(t, w.Pending())
		require.Equal(t, map[string]int{worker.OutcomeProcessed: 1, worker.OutcomeOutOfOrder: 1}, outcomes.counts())

		// Without a sequence (a producer that predates it) an event is
		// applied as before.
		old := reservationtest.InsertWorking(t, db.DB, time.Now().Add(time.Hour))
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

// dbClockRecorder is a Publisher that notes the database's time of each call.
type dbClockRecorder struct {
	db *gorm.DB
	mu sync.Mutex
	at []time.Time
}

func (r *dbClockRecorder) Publish(ctx context.Context, _ worker.Publishing) error {
	now, err := database.Now(ctx, r.db)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, now)
	return nil
}

func (r *dbClockRecorder) calls() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...)
}

// A worker whose own clock runs minutes ahead of the database's does not
// publish before scheduledAt by the database's clock: its timer fires at
// once, the publication is found not due, and the timer is re-armed for the
// time left, so the post goes out at its time.
func TestWorkerClockAheadDoesNotPublishEarly(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &dbClockRecorder{db: db.DB}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			Now: func() time.Time { return time.Now().Add(5 * time.Minute) }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		dbNow, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		post := reservationtest.InsertWorking(t, db.DB, dbNow.Add(2*time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))
		status, err := w.PublishDue(ctx, post.ID)
		require.ErrorIs(t, err, worker.ErrNotDue)
		require.Equal(t, worker.PublicationPending, status)

		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			20*time.Second, 10*time.Millisecond, "never published")
		calls := pub.calls()
		require.Len(t, calls, 1)
		require.False(t, calls[0].Before(post.ScheduledAt),
			"publisher called at %s by the database's clock, before scheduledAt %s", calls[0], post.ScheduledAt)
		after, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		got := loadPost(t, db.DB, post.ID)
		require.NotNil(t, got.PublishedAt)
		require.False(t, got.PublishedAt.Before(post.ScheduledAt), "publishedAt %s before %s", got.PublishedAt, post.ScheduledAt)
		require.False(t, got.PublishedAt.After(after), "publishedAt %s is in the database's future (%s): the worker's clock", got.PublishedAt, after)
		p := loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, 1, p.Attempts, "waiting for the time is no attempt")
		require.False(t, p.UpdatedAt.After(after))
		require.False(t, p.CreatedAt.After(after), "created_at from the worker's clock")
		require.Less(t, got.PublishedAt.Sub(post.ScheduledAt), 5*time.Second, "re-armed for the time left, not a retry pause")
	})
}

// A worker whose own clock runs minutes behind the database's still
// publishes at scheduledAt by the database's clock, not minutes late: the
// scheduler and the relay go by the database's clock, so the reservation
// arrives on time, and the worker's timer must not add its own clock's lag
// (its timers are set from the database's clock, not its own).
func TestWorkerClockBehindPublishesOnTime(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &dbClockRecorder{db: db.DB}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(),
			Now: func() time.Time { return time.Now().Add(-3 * time.Minute) }})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()

		dbNow, err := database.Now(ctx, db.DB)
		require.NoError(t, err)
		post := reservationtest.InsertWorking(t, db.DB, dbNow.Add(time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))

		// Generous: the post is due in 1 s; a worker 3 minutes behind waits 3 minutes more.
		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			30*time.Second, 20*time.Millisecond, "not published within 30 s of a time 1 s away: the timer follows the worker's clock, 3 minutes behind")
		calls := pub.calls()
		require.Len(t, calls, 1)
		require.False(t, calls[0].Before(post.ScheduledAt), "published early: %s before %s", calls[0], post.ScheduledAt)
		require.Equal(t, worker.PublicationPublished, loadPublication(t, db.DB, post.ID).Status)
	})
}

// starved is what the receiver had seen when the healthy post's request
// came (starvation).
type starved struct {
	hangsEnded int // hanging requests that ended (timed out)
	failures   int // requests of failing posts so far, first tries and retries
}

// starvation runs 12 posts whose receiver answers 503 (and, with hang,
// every other one hangs until the request times out) and one healthy post
// due 100 ms after them, through a webhook and a worker of cfg, and
// returns what the receiver had seen when it got the healthy post.
func starvation(t *testing.T, db *database.DB, cfg worker.Config, hang bool) starved {
	t.Helper()
	now := time.Now()
	var failing []*reservation.Post
	for range 12 {
		failing = append(failing, reservationtest.InsertWorking(t, db.DB, now))
	}
	good := reservationtest.InsertWorking(t, db.DB, now.Add(100*time.Millisecond))

	var (
		mu       sync.Mutex
		received time.Time // when the healthy post's request came
		failures int
		ended    int
		atGood   starved
	)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			ID int64 `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		if body.ID == good.ID {
			mu.Lock()
			received = time.Now()
			atGood = starved{hangsEnded: ended, failures: failures}
			mu.Unlock()
			return
		}
		mu.Lock()
		failures++
		mu.Unlock()
		if hang && body.ID%2 == 0 {
			select { // until the worker's request times out or the test ends
			case <-r.Context().Done():
			case <-release:
			}
			mu.Lock()
			ended++
			mu.Unlock()
			return
		}
		rw.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	hook, err := worker.NewWebhook(worker.WebhookConfig{URL: srv.URL})
	require.NoError(t, err)
	cfg.Publisher, cfg.Logger = hook, quiet()
	w, err := worker.New(db.DB, cfg)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	ctx := context.Background()
	for _, p := range failing {
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
	}
	require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, good), 0)))

	require.Eventually(t, func() bool { return loadPost(t, db.DB, good.ID).Status == reservation.StatusPublished },
		30*time.Second, 10*time.Millisecond, "the healthy post was not published within 30 s")
	mu.Lock()
	got := received
	mu.Unlock()
	require.False(t, got.IsZero(), "published without its request")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return failures >= 12 },
		30*time.Second, 10*time.Millisecond, "the failing posts were never tried")
	for _, p := range failing {
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, p.ID).Status)
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, p.ID).Status)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("healthy post received %s after its time, after %d hanging requests ended and %d failing requests made",
		got.Sub(good.ScheduledAt), atGood.hangsEnded, atGood.failures)
	return atGood
}

// With the default concurrency, 12 posts whose receiver fails (503) or
// hangs do not hold back a healthy post due 100 ms later: its request
// comes before any hanging one ended (at the webhook's 10 s timeout).
func TestWorkerFailingWebhookPostsDoNotStarveHealthyOnes(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		seen := starvation(t, db, worker.Config{}, true)
		require.Zero(t, seen.hangsEnded, "the healthy post waited for a hanging request to end")
	})
}

// The slots are what is saved, not only their number: with 2 slots, 12
// posts that keep failing still leave room, since a publication holds a
// slot during one request and none while it waits to try again. Were the
// slots held through the pauses, the healthy post would wait at least one
// whole pause (RetryBase, 5 s here) behind the failing ones: its request
// comes before any failing post is tried a second time.
func TestWorkerBackoffHoldsNoSlot(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		seen := starvation(t, db, worker.Config{Concurrency: 2, RetryBase: 5 * time.Second, RetryMax: time.Minute}, false)
		require.LessOrEqual(t, seen.failures, 12, "the healthy post waited for the failing ones' next tries")
	})
}

// The default concurrency is no longer the 4 slots that a spike queued
// behind.
func TestWorkerDefaultConcurrency(t *testing.T) {
	t.Parallel()
	w, err := worker.New(nil, worker.Config{})
	require.NoError(t, err)
	require.Equal(t, worker.DefaultConcurrency, w.Config().Concurrency)
	require.GreaterOrEqual(t, w.Config().Concurrency, 32)
}

// Posts due at the same instant are published in batches: each exactly once,
// none before its time by the database's clock, and with far fewer claims
// and PUBLISHED writes than posts; a post cancelled before its time is not
// published.
func TestBatchedPublishingPublishesEachPostOnceNotEarly(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		const n = 400
		var writes, claims atomic.Int64
		databasetest.Before(t, db.DB, databasetest.StmtExec, func(tx *gorm.DB) {
			switch {
			case markPublished(tx):
				writes.Add(1)
			case claim(tx):
				claims.Add(1)
			}
		})
		far := databasetest.Now(t, db.DB).Add(time.Hour)
		posts := make([]*reservation.Post, n)
		for i := range posts {
			posts[i] = reservationtest.InsertWorking(t, db.DB, far)
		}
		rec := &recorder{}
		w := newWorker(t, db.DB, rec)
		ctx := context.Background()
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{0}))
		cancelled := map[int64]bool{}
		for i := 0; i < n; i += 10 {
			require.NoError(t, db.Exec("UPDATE posts SET status = ?, version = version + 1 WHERE id = ?", reservation.StatusCancelled, posts[i].ID).Error)
			cancelled[posts[i].ID] = true
		}
		for _, p := range posts {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
		}
		// All due a second from now: re-armed from the table by a new
		// assignment, as after a restart.
		due := databasetest.Now(t, db.DB).Add(time.Second)
		require.NoError(t, db.Exec("UPDATE posts SET scheduled_at = ?", due).Error)
		require.NoError(t, db.Exec("UPDATE publications SET scheduled_at = ?", due).Error)
		w.Revoked("posting-events", []int32{0})
		writes.Store(0)
		claims.Store(0)
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{0}))

		deadline := time.Now().Add(time.Minute)
		for {
			var left int64
			require.NoError(t, db.Model(&worker.Publication{}).Where("status = ?", worker.PublicationPending).Count(&left).Error)
			if left == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%d publications still pending", left)
			time.Sleep(20 * time.Millisecond) // polling the condition
		}
		for _, p := range posts {
			got := loadPost(t, db.DB, p.ID)
			var pub worker.Publication
			require.NoError(t, db.Where("post_id = ?", p.ID).Take(&pub).Error)
			if cancelled[p.ID] {
				require.Equal(t, reservation.StatusCancelled, got.Status)
				require.Equal(t, worker.PublicationCancelled, pub.Status)
				require.Zero(t, rec.count(p.ID), "post %d was cancelled", p.ID)
				continue
			}
			require.Equal(t, reservation.StatusPublished, got.Status, "post %d", p.ID)
			require.Equal(t, worker.PublicationPublished, pub.Status)
			require.Equal(t, 1, rec.count(p.ID), "post %d", p.ID)
			require.NotNil(t, got.PublishedAt)
			require.False(t, got.PublishedAt.Before(got.ScheduledAt), "post %d published at %s, due %s", p.ID, got.PublishedAt, got.ScheduledAt)
		}
		published := n - len(cancelled)
		require.Equal(t, published, rec.total())
		require.Less(t, writes.Load(), int64(published)/4, "the PUBLISHED writes were batched")
		require.Less(t, claims.Load(), int64(published)/4, "the claims at the slot were batched")
		t.Logf("%d posts published with %d UPDATE statements, claimed with %d", published, writes.Load(), claims.Load())
	})
}

// A database blip after the publisher said yes (the connection dropped while
// the worker recorded PUBLISHED) must not make the worker call the
// publisher again: the post went out; only its record is missing. The README
// promises a second webhook POST only when the worker is killed or loses its
// partition between the POST and the commit.
func TestWorkerFailedRecordDoesNotPublishAgain(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		var failed atomic.Int32
		databasetest.Fail(t, db.DB, databasetest.StmtExec, driver.ErrBadConn, func(tx *gorm.DB) bool {
			return markPublished(tx) && failed.Add(1) == 1
		})
		pub := &recorder{}
		w := newWorker(t, db.DB, pub)
		ctx := context.Background()
		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))

		require.Eventually(t, func() bool { return loadPost(t, db.DB, post.ID).Status == reservation.StatusPublished },
			20*time.Second, 10*time.Millisecond, "never published")
		require.GreaterOrEqual(t, failed.Load(), int32(2), "the record failed once, then was written")
		require.Equal(t, 1, pub.count(post.ID), "the publisher was called again after a failed record")
		p := loadPublication(t, db.DB, post.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, 1, p.Attempts)
	})
}

// markPublished is the worker's write of PUBLISHED to posts.
var markPublished = databasetest.SQLStarts("UPDATE posts SET status")

// claim is the worker's claim of posts at the slot.
var claim = databasetest.SQLStarts("UPDATE posts SET publish_claimed_at")

// signalling is a Publisher that says yes and tells of each call.
type signalling struct{ called chan struct{} }

func (s signalling) Publish(context.Context, worker.Publishing) error {
	select {
	case s.called <- struct{}{}:
	default:
	}
	return nil
}

// While the database is down, retrying the PUBLISHED write must not hold
// Stop (or a revocation) for the write's whole 30 s: once the timer is
// disarmed the write gets one last try and the attempt ends.
func TestWorkerStopDoesNotWaitOutAFailingRecord(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		databasetest.Fail(t, db.DB, databasetest.StmtExec, driver.ErrBadConn, markPublished)
		pub := signalling{called: make(chan struct{}, 1)}
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet()})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()
		post := reservationtest.InsertWorking(t, db.DB, time.Now().Add(-time.Second))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))
		select {
		case <-pub.called:
		case <-time.After(20 * time.Second):
			t.Fatal("the publisher was never called")
		}
		stopped := make(chan struct{})
		go func() { w.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(15 * time.Second): // the write alone may take 30 s
			t.Fatal("Stop waited for the failing write to give up")
		}
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, post.ID).Status)
	})
}

// Posts due at the same instant share one alarm: a post cancelled before it
// rings is left out and the others are published once each, not early.
func TestPostsDueTogetherPublishedWithoutTheOneCancelled(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		at := databasetest.Now(t, db.DB).Add(800 * time.Millisecond)
		a, b, c := reservationtest.InsertWorking(t, db.DB, at), reservationtest.InsertWorking(t, db.DB, at), reservationtest.InsertWorking(t, db.DB, at)
		rec := &recorder{}
		w := newWorker(t, db.DB, rec)
		ctx := context.Background()
		for _, p := range []*reservation.Post{a, b, c} {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 0)))
		}
		require.Equal(t, 3, w.Pending())
		require.NoError(t, db.Exec("UPDATE posts SET status = ?, version = version + 1 WHERE id = ?", reservation.StatusCancelled, b.ID).Error)
		require.NoError(t, w.Handle(ctx, decode(t, cancelRecord(t, b), 0)))
		require.Equal(t, 2, w.Pending(), "the cancelled post's timer is disarmed")

		awaitPublished(t, db.DB, a, c)
		for _, p := range []*reservation.Post{a, c} {
			got := loadPost(t, db.DB, p.ID)
			require.False(t, got.PublishedAt.Before(p.ScheduledAt), "published before its time")
			require.Equal(t, 1, rec.count(p.ID))
		}
		require.Zero(t, rec.count(b.ID), "the cancelled post was published")
		require.Equal(t, reservation.StatusCancelled, loadPost(t, db.DB, b.ID).Status)
		require.Equal(t, worker.PublicationCancelled, loadPublication(t, db.DB, b.ID).Status)
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
	})
}

// Revoking the partition of every post of an alarm stops it: none of them is
// published after their time has passed, and a later assignment publishes
// them.
func TestAlarmOfRevokedPostsDoesNotRing(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		at := databasetest.Now(t, db.DB).Add(500 * time.Millisecond)
		a, b := reservationtest.InsertWorking(t, db.DB, at), reservationtest.InsertWorking(t, db.DB, at)
		rec := &recorder{}
		w := newWorker(t, db.DB, rec)
		ctx := context.Background()
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{3}))
		for _, p := range []*reservation.Post{a, b} {
			require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, p), 3)))
		}
		require.Equal(t, 2, w.Pending())
		w.Revoked("posting-events", []int32{3})
		require.Zero(t, w.Pending())
		time.Sleep(time.Until(database.Normalize(time.Now()).Add(time.Second))) // past their time
		require.Zero(t, rec.total(), "a revoked post was published")
		require.Equal(t, reservation.StatusWorking, loadPost(t, db.DB, a.ID).Status)

		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{3}))
		awaitPublished(t, db.DB, a, b)
		require.Equal(t, 1, rec.count(a.ID))
		require.Equal(t, 1, rec.count(b.ID))
	})
}

// refuser is a Publisher that refuses every post while refuse is set.
type refuser struct {
	recorder
	refuse atomic.Bool
}

func (r *refuser) Publish(ctx context.Context, p worker.Publishing) error {
	if r.refuse.Load() {
		return fmt.Errorf("%w: receiver says no to post %d", worker.ErrRefused, p.Post.ID)
	}
	return r.recorder.Publish(ctx, p)
}

// retry sets a FAILED publication back to PENDING in the database only, as
// `posting publications retry` does.
func retry(t *testing.T, db *gorm.DB, postID int64) {
	t.Helper()
	res := db.Model(&worker.Publication{}).Where("post_id = ? AND status = ?", postID, worker.PublicationFailed).
		Updates(map[string]any{"status": worker.PublicationPending, "attempts": 0, "last_error": nil})
	require.NoError(t, res.Error)
	require.EqualValues(t, 1, res.RowsAffected)
}

// A publication set back to PENDING directly in the database (an operator's
// retry of a FAILED one) is published by the running worker that owns its
// partition, found by the periodic sweep; a worker that does not own the
// partition (never assigned, or revoked) leaves it alone.
func TestWorkerSweepPublishesRowsSetBackToPending(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		pub := &refuser{}
		pub.refuse.Store(true)
		w, err := worker.New(db.DB, worker.Config{Publisher: pub, Logger: quiet(), SweepInterval: 50 * time.Millisecond,
			RetryBase: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(w.Stop)
		ctx := context.Background()
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{4}))

		owned := reservationtest.InsertWorking(t, db.DB, time.Now())
		other := reservationtest.InsertWorking(t, db.DB, time.Now()) // partition 5: not this worker's
		later := reservationtest.InsertWorking(t, db.DB, time.Now()) // partition 4, retried after the revocation
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, owned), 4)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, other), 5)))
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, later), 4)))
		for _, p := range []*reservation.Post{owned, other, later} {
			require.Eventually(t, func() bool { return loadPublication(t, db.DB, p.ID).Status == worker.PublicationFailed },
				10*time.Second, 10*time.Millisecond)
		}
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)

		pub.refuse.Store(false)
		retry(t, db.DB, owned.ID)
		retry(t, db.DB, other.ID)
		require.Eventually(t, func() bool { return loadPost(t, db.DB, owned.ID).Status == reservation.StatusPublished },
			10*time.Second, 10*time.Millisecond, "the retried publication was never published")
		p := loadPublication(t, db.DB, owned.ID)
		require.Equal(t, worker.PublicationPublished, p.Status)
		require.Equal(t, 1, p.Attempts)
		require.Nil(t, p.LastError)

		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
		n, err := w.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "armed a publication of a partition it does not own")
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, other.ID).Status)

		w.Revoked("posting-events", []int32{4})
		retry(t, db.DB, later.ID)
		n, err = w.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "armed a publication of a revoked partition")
		require.Zero(t, w.Pending())

		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{4, 5}))
		for _, p := range []*reservation.Post{other, later} {
			awaitPublished(t, db.DB, p)
		}
		for _, p := range []*reservation.Post{owned, other, later} {
			require.Equal(t, 1, pub.count(p.ID))
		}
	})
}

// TestConfigValidationNamesTheFirstSettingOut: with RetryBase (or RetryMax)
// and SweepInterval both out of their limits, the refusal names the retry
// setting, the first of them in the Config, as it did before the retry
// check moved into backoff.CheckRetry.
func TestConfigValidationNamesTheFirstSettingOut(t *testing.T) {
	t.Parallel()
	c := worker.DefaultConfig()
	c.RetryBase, c.SweepInterval = -time.Second, time.Nanosecond
	require.ErrorContains(t, c.Validate(), "worker.Config.RetryBase ")
	c.RetryBase, c.RetryMax = time.Second, time.Millisecond
	require.ErrorContains(t, c.Validate(), "worker.Config.RetryMax ")
}
