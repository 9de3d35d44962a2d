package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// gate is a Publisher that records every call as it enters, and holds the
// first one until open is closed: with Concurrency 1, every other post waits
// for the slot meanwhile.
type gate struct {
	recorder
	first   atomic.Int64 // the post of the first call
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) Publish(ctx context.Context, p worker.Publishing) error {
	if err := g.recorder.Publish(ctx, p); err != nil {
		return err
	}
	if g.first.CompareAndSwap(0, p.Post.ID) {
		close(g.entered)
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// held waits until the first call holds the only slot and returns the post
// being published and the other of a and b, the one waiting for the slot.
func (g *gate) held(t *testing.T, a, b *reservation.Post) (first, waiting *reservation.Post) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the publisher was never called")
	}
	if g.first.Load() == a.ID {
		return a, b
	}
	return b, a
}

// slotWorker is a worker with one slot, publishing through pub.
func slotWorker(t *testing.T, db *gorm.DB, pub worker.Publisher, settled *tally) *worker.Worker {
	t.Helper()
	w, err := worker.New(db, worker.Config{Publisher: pub, Logger: quiet(), Concurrency: 1,
		RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, ObserveSettled: settled.add})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

// twoDueTogether writes two WORKING posts due in a moment, at the same
// instant (one alarm), and hands their reservations to w.
func twoDueTogether(t *testing.T, db *gorm.DB, w *worker.Worker) (a, b *reservation.Post) {
	t.Helper()
	at := databasetest.Now(t, db).Add(300 * time.Millisecond)
	a, b = reservationtest.InsertWorking(t, db, at), reservationtest.InsertWorking(t, db, at)
	for _, p := range []*reservation.Post{a, b} {
		require.NoError(t, w.Handle(context.Background(), decode(t, reservationRecord(t, p), 0)))
	}
	return a, b
}

// awaitPublication waits until the post's publication is settled, and
// checks that it is status.
func awaitPublication(t *testing.T, db *gorm.DB, id int64, status worker.PublicationStatus) {
	t.Helper()
	require.Eventually(t, func() bool { return loadPublication(t, db, id).Status != worker.PublicationPending },
		20*time.Second, 10*time.Millisecond, "publication of post %d never settled", id)
	require.Equal(t, status, loadPublication(t, db, id).Status, "publication of post %d", id)
}

// A cancel that commits while the publication waits for
// a slot. Concurrency 1, two posts due together, the first call held; the
// second post is cancelled through the service, its CANCELLED event never
// reaching the worker. Once the slot frees, the worker reads the post again
// (its claim) and never calls the publisher for it: its publication settles
// CANCELLED. Before the claim, the post read when the alarm rang was
// published to the receiver after the API had answered the cancel with 200.
func TestWorkerCallsNoPublisherForAPostCancelledWhileItWaitedForASlot(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		g := newGate()
		var settled tally
		w := slotWorker(t, db.DB, g, &settled)
		a, b := twoDueTogether(t, db.DB, w)
		first, waiting := g.held(t, a, b)

		_, err = svc.Cancel(ctx, waiting.ID)
		require.NoError(t, err)
		close(g.open)

		awaitPublished(t, db.DB, first)
		awaitPublication(t, db.DB, waiting.ID, worker.PublicationCancelled)
		require.Zero(t, g.count(waiting.ID), "the publisher was called for the cancelled post")
		require.Equal(t, 1, g.count(first.ID))
		got := loadPost(t, db.DB, waiting.ID)
		require.Equal(t, reservation.StatusCancelled, got.Status)
		require.Nil(t, got.PublishClaimedAt, "a cancelled post was claimed")
		require.NotNil(t, loadPost(t, db.DB, first.ID).PublishClaimedAt, "the published post was not claimed")
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, map[string]int{worker.OutcomePublished: 1, worker.OutcomeCancelled: 1}, settled.counts())
	})
}

// A post whose publishBy passes while it waits for a slot is never handed
// to the publisher: the worker, holding the slot, finds it past its
// deadline by the database's clock and expires it itself, the post EXPIRED
// with its POSTING_EVENT EXPIRED in the outbox and the publication EXPIRED,
// in one transaction.
func TestWorkerExpiresAPostWhosePublishByPassedWhileItWaited(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		g := newGate()
		var settled tally
		w := slotWorker(t, db.DB, g, &settled)
		a, b := twoDueTogether(t, db.DB, w)
		first, waiting := g.held(t, a, b)
		by := databasetest.Now(t, db.DB).Add(200 * time.Millisecond)
		require.NoError(t, db.Model(&reservation.Post{}).Where("id = ?", waiting.ID).Update("publish_by", by).Error)
		require.Eventually(t, func() bool { return databasetest.Now(t, db.DB).After(by) }, 10*time.Second, 10*time.Millisecond)
		close(g.open)

		awaitPublished(t, db.DB, first)
		awaitPublication(t, db.DB, waiting.ID, worker.PublicationExpired)
		require.Zero(t, g.count(waiting.ID), "the publisher was called past the post's publishBy")
		requireExpired(t, db.DB, waiting.ID)
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, map[string]int{worker.OutcomePublished: 1, worker.OutcomeExpired: 1}, settled.counts())
	})
}

// A worker that was down from before a post's time until after its
// publishBy finds, once it is assigned the partition again, a PENDING
// publication of a WORKING post: it never calls the publisher, it expires
// the post.
func TestWorkerStartedAfterThePublishByNeverPublishes(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		now := databasetest.Now(t, db.DB)
		post := reservationtest.InsertWorking(t, db.DB, now.Add(-2*time.Minute))
		require.NoError(t, db.Model(&reservation.Post{}).Where("id = ?", post.ID).Update("publish_by", now.Add(-time.Minute)).Error)
		// The reservation was consumed before the time by a worker that
		// stopped at once and stayed down.
		down := newWorker(t, db.DB, &recorder{})
		down.Stop()
		require.NoError(t, down.Handle(ctx, decode(t, reservationRecord(t, post), 2)))
		require.Equal(t, worker.PublicationPending, loadPublication(t, db.DB, post.ID).Status)

		pub := &recorder{}
		var settled tally
		w := slotWorker(t, db.DB, pub, &settled)
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{2}))
		awaitPublication(t, db.DB, post.ID, worker.PublicationExpired)
		require.Zero(t, pub.total(), "the publisher was called past the post's publishBy")
		requireExpired(t, db.DB, post.ID)
		// Told once the attempt is over, after the commit.
		require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, map[string]int{worker.OutcomeExpired: 1}, settled.counts())
	})
}

// requireExpired checks that the post is EXPIRED, unpublished and unclaimed,
// with one POSTING_EVENT EXPIRED in the outbox.
func requireExpired(t *testing.T, db *gorm.DB, id int64) {
	t.Helper()
	got := loadPost(t, db, id)
	require.Equal(t, reservation.StatusExpired, got.Status)
	require.Nil(t, got.PublishedAt)
	require.Nil(t, got.PublishClaimedAt, "an expired post was claimed")
	var rows []outbox.Message
	require.NoError(t, db.Where("aggregate_id = ? AND event_type = ?", id, event.PostingEvent).Find(&rows).Error)
	require.Len(t, rows, 1, "the EXPIRED event")
	var f event.PostingEventFields
	require.NoError(t, json.Unmarshal([]byte(rows[0].Payload), &f))
	require.Equal(t, event.ActionExpired, f.Action)
	require.Equal(t, string(reservation.StatusExpired), f.Status)
}

// failOnceUntil fails its first call, after the database's clock has passed
// until (a receiver that answered 503 slowly, or a worker killed after the
// receiver's answer), and records every call.
type failOnceUntil struct {
	recorder
	db    *gorm.DB
	until time.Time
	first atomic.Bool
}

func (f *failOnceUntil) Publish(ctx context.Context, p worker.Publishing) error {
	if err := f.recorder.Publish(ctx, p); err != nil {
		return err
	}
	if f.first.CompareAndSwap(false, true) {
		for {
			now, err := database.Now(ctx, f.db)
			if err != nil || now.After(f.until) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return errors.New("503 from the receiver")
	}
	return nil
}

// A claim made in time stands past the deadline: the receiver was called
// before the post's publishBy, so it may have acted on the call; the worker
// never expires such a post, and neither does serve's expirer (it leaves
// claimed posts alone). The retry after the deadline calls the publisher
// again with the same key, and the post ends PUBLISHED, never EXPIRED after
// a call.
func TestWorkerKeepsAClaimMadeInTimePastTheDeadline(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		now := databasetest.Now(t, db.DB)
		post := reservationtest.InsertWorking(t, db.DB, now.Add(200*time.Millisecond))
		by := now.Add(400 * time.Millisecond)
		require.NoError(t, db.Model(&reservation.Post{}).Where("id = ?", post.ID).Update("publish_by", by).Error)
		pub := &failOnceUntil{db: db.DB, until: by}
		var settled tally
		w := slotWorker(t, db.DB, pub, &settled)
		require.NoError(t, w.Handle(ctx, decode(t, reservationRecord(t, post), 0)))

		awaitPublication(t, db.DB, post.ID, worker.PublicationPublished)
		got := loadPost(t, db.DB, post.ID)
		require.Equal(t, reservation.StatusPublished, got.Status, "a post called in time is not expired after the call")
		require.NotNil(t, got.PublishClaimedAt)
		require.False(t, got.PublishClaimedAt.After(by), "claimed before its deadline")
		require.Equal(t, 2, pub.count(post.ID), "the failed call, then the retry past the deadline")
		var payloads []string
		require.NoError(t, db.Table("outbox").Where("aggregate_id = ?", post.ID).Pluck("payload", &payloads).Error)
		for _, p := range payloads {
			require.NotContains(t, p, "EXPIRED", "no EXPIRED event")
		}
	})
}
