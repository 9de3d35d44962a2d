package overdue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

const grace = time.Minute

// fixture writes posts and their rows straight into a database, at times
// relative to its clock.
type fixture struct {
	t   *testing.T
	db  *gorm.DB
	now time.Time
}

func newFixture(t *testing.T, db *database.DB) *fixture {
	return &fixture{t: t, db: db.DB, now: databasetest.Now(t, db.DB)}
}

// post writes a post in status scheduled at now+at, with publishBy at
// now+*by when by is set.
func (f *fixture) post(status reservation.Status, at time.Duration, by *time.Duration) int64 {
	f.t.Helper()
	p := reservation.Post{Title: "t", Content: "c", Status: status, ScheduledAt: f.now.Add(at),
		CreatedAt: f.now, UpdatedAt: f.now, Version: optimisticlock.Version{Int64: 1, Valid: true}}
	if by != nil {
		d := f.now.Add(*by)
		p.PublishBy = &d
	}
	require.NoError(f.t, f.db.Create(&p).Error)
	return p.ID
}

// reservation writes post id's reservation event in status, sent at
// now+sentAgo when SENT.
func (f *fixture) reservation(id int64, status outbox.Status, sentAt time.Duration) {
	f.t.Helper()
	e, err := event.New(event.ReservationEvent, id, f.now, event.ReservationEventFields{ScheduledAt: f.now})
	require.NoError(f.t, err)
	m, err := outbox.Append(f.db, reservation.OutboxEvent(e, event.ReservationDedupKey(id)))
	require.NoError(f.t, err)
	changes := map[string]any{"status": status}
	if status == outbox.StatusSent {
		changes["sent_at"] = f.now.Add(sentAt)
	}
	if status == outbox.StatusFail {
		changes["last_error"] = "rejected by the broker"
	}
	require.NoError(f.t, f.db.Model(&outbox.Message{}).Where("id = ?", m.ID).Updates(changes).Error)
}

// publication writes post id's publication in status.
func (f *fixture) publication(id int64, status, lastError string) {
	f.t.Helper()
	require.NoError(f.t, f.db.Exec("INSERT INTO publications (post_id, event_id, partition_id, scheduled_at, status, attempts, last_error, created_at, updated_at) "+
		"VALUES (?, ?, 0, ?, ?, 2, ?, ?, ?)", id, fmt.Sprintf("ev-%d", id), f.now, status, lastError, f.now, f.now).Error)
}

func dur(d time.Duration) *time.Duration { return &d }

func newChecker(t *testing.T, db *database.DB, instance string, reannounce int) *overdue.Checker {
	t.Helper()
	cfg := overdue.DefaultConfig()
	cfg.Grace, cfg.Interval, cfg.Reannounce, cfg.InstanceID = grace, time.Second, reannounce, instance
	c, err := overdue.New(db.DB, cfg)
	require.NoError(t, err)
	return c
}

// Every post past its grace that is not final is listed, with the link of
// the chain it is stuck at; final posts and posts within their grace are not.
func TestListNamesWhyEachOverduePostIsStuck(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		old := -10 * time.Minute
		reserved := f.post(reservation.StatusReserved, old, nil)
		unsent := f.post(reservation.StatusWorking, old+time.Second, nil)
		f.reservation(unsent, outbox.StatusRetry, 0)
		failed := f.post(reservation.StatusWorking, old+2*time.Second, nil)
		f.reservation(failed, outbox.StatusFail, 0)
		noPub := f.post(reservation.StatusWorking, old+3*time.Second, nil)
		f.reservation(noPub, outbox.StatusSent, old)
		pending := f.post(reservation.StatusWorking, old+4*time.Second, nil)
		f.reservation(pending, outbox.StatusSent, old)
		f.publication(pending, "PENDING", "503 from the receiver")
		refused := f.post(reservation.StatusWorking, old+5*time.Second, nil)
		f.reservation(refused, outbox.StatusSent, old)
		f.publication(refused, "FAILED", "400 from the receiver")
		settled := f.post(reservation.StatusWorking, old+6*time.Second, nil)
		f.reservation(settled, outbox.StatusSent, old)
		f.publication(settled, "PUBLISHED", "")
		// Not overdue: final, or within the grace, or not yet due.
		f.post(reservation.StatusPublished, old, nil)
		f.post(reservation.StatusCancelled, old, nil)
		f.post(reservation.StatusExpired, old, nil)
		f.post(reservation.StatusWorking, -grace/2, nil)
		f.post(reservation.StatusReserved, time.Hour, nil)

		items, sum, err := overdue.List(context.Background(), db.DB, grace, 100)
		require.NoError(t, err)
		require.Equal(t, 7, sum.Count)
		require.InDelta(t, (10 * time.Minute).Seconds(), sum.Oldest.Seconds(), 5)
		got := map[int64]overdue.Reason{}
		var order []int64
		for _, it := range items {
			got[it.ID] = it.Reason
			order = append(order, it.ID)
		}
		require.Equal(t, []int64{reserved, unsent, failed, noPub, pending, refused, settled}, order, "oldest first")
		require.Equal(t, map[int64]overdue.Reason{
			reserved: overdue.ReasonNotReserved,
			unsent:   overdue.ReasonEventUnsent,
			failed:   overdue.ReasonEventFailed,
			noPub:    overdue.ReasonNoPublication,
			pending:  overdue.ReasonPublicationPending,
			refused:  overdue.ReasonPublicationFailed,
			settled:  overdue.ReasonPublicationSettled,
		}, got)
		require.Equal(t, "400 from the receiver", items[5].Detail)
		require.Equal(t, "rejected by the broker", items[2].Detail)

		limited, _, err := overdue.List(context.Background(), db.DB, grace, 2)
		require.NoError(t, err)
		require.Len(t, limited, 2)
	})
}

// A post past its publishBy becomes EXPIRED with an EXPIRED event, unless
// the worker has claimed it for publishing; a post within its deadline, or
// without one, is left as it is.
func TestCheckExpiresPostsPastTheirDeadlineThatNoWorkerClaimed(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		late := f.post(reservation.StatusWorking, -time.Hour, dur(-time.Minute))
		lateReserved := f.post(reservation.StatusReserved, -time.Hour, dur(-time.Second))
		claimed := f.post(reservation.StatusWorking, -time.Hour, dur(-time.Minute))
		require.NoError(t, db.Exec("UPDATE posts SET publish_claimed_at = ? WHERE id = ?", f.now.Add(-2*time.Minute), claimed).Error)
		inTime := f.post(reservation.StatusWorking, -time.Hour, dur(time.Hour))
		noDeadline := f.post(reservation.StatusWorking, -time.Hour, nil)
		cancelled := f.post(reservation.StatusCancelled, -time.Hour, dur(-time.Minute))

		res, err := newChecker(t, db, "a", 0).RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, res.Leader)
		require.Equal(t, 2, res.Expired)
		status := func(id int64) reservation.Status {
			return databasetest.Load[reservation.Post](t, db.DB, id).Status
		}
		require.Equal(t, reservation.StatusExpired, status(late))
		require.Equal(t, reservation.StatusExpired, status(lateReserved))
		require.Equal(t, reservation.StatusWorking, status(claimed), "the worker decides a claimed post")
		require.Equal(t, reservation.StatusWorking, status(inTime))
		require.Equal(t, reservation.StatusWorking, status(noDeadline))
		require.Equal(t, reservation.StatusCancelled, status(cancelled))

		var evs []outbox.Message
		require.NoError(t, db.Where("event_type = ?", event.PostingEvent).Order("aggregate_id").Find(&evs).Error)
		require.Len(t, evs, 2)
		for i, id := range []int64{late, lateReserved} {
			require.Equal(t, id, evs[i].AggregateID)
			var v event.PostingEventFields
			require.NoError(t, json.Unmarshal([]byte(evs[i].Payload), &v))
			require.Equal(t, event.ActionExpired, v.Action)
			require.Equal(t, string(reservation.StatusExpired), v.Status)
		}
		// 3 overdue: the claimed, the in-time and the no-deadline WORKING posts.
		require.Equal(t, 3, res.Overdue)

		again, err := newChecker(t, db, "a", 0).RunOnce(context.Background())
		require.NoError(t, err)
		require.Zero(t, again.Expired, "an expired post is expired once")
	})
}

// An overdue WORKING post whose reservation was sent more than a grace ago
// and made no publication is announced again, a new outbox row each time,
// up to the limit; posts with a publication, with an unsent event or sent
// within the grace are not.
func TestCheckReannouncesASentReservationThatMadeNoPublicationUpToItsLimit(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		lost := f.post(reservation.StatusWorking, -10*time.Minute, nil)
		f.reservation(lost, outbox.StatusSent, -9*time.Minute)
		published := f.post(reservation.StatusWorking, -10*time.Minute, nil)
		f.reservation(published, outbox.StatusSent, -9*time.Minute)
		f.publication(published, "PENDING", "")
		unsent := f.post(reservation.StatusWorking, -10*time.Minute, nil)
		f.reservation(unsent, outbox.StatusPending, 0)
		recent := f.post(reservation.StatusWorking, -10*time.Minute, nil)
		f.reservation(recent, outbox.StatusSent, -grace/2)

		c := newChecker(t, db, "a", 2)
		ctx := context.Background()
		res, err := c.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Reannounced)
		reservations := func(id int64) []outbox.Message {
			var ms []outbox.Message
			require.NoError(t, db.Where("aggregate_id = ? AND event_type = ?", id, event.ReservationEvent).Order("id").Find(&ms).Error)
			return ms
		}
		ms := reservations(lost)
		require.Len(t, ms, 2)
		require.Equal(t, outbox.StatusPending, ms[1].Status)
		require.Equal(t, fmt.Sprintf("reservation:%d:1", lost), *ms[1].DedupKey)
		require.Greater(t, ms[1].ID, ms[0].ID, "the new event's sequence is above the first")
		require.Equal(t, 1, databasetest.Load[reservation.Post](t, db.DB, lost).Reannounced)
		for _, id := range []int64{published, unsent, recent} {
			require.Len(t, reservations(id), 1, "post %d", id)
		}

		// The new event is unsent: no second announcement until it was sent
		// more than a grace ago.
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Reannounced)
		sendAllBefore := func(ago time.Duration) {
			require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ?", lost).
				Updates(map[string]any{"status": outbox.StatusSent, "sent_at": f.now.Add(ago)}).Error)
		}
		sendAllBefore(-5 * time.Minute)
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Reannounced)
		sendAllBefore(-5 * time.Minute)
		res, err = c.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Reannounced, "at most twice")
		require.Len(t, reservations(lost), 3)
		require.Equal(t, 4, res.Overdue, "a repair that does not help leaves the post overdue")

		items, _, err := overdue.List(ctx, db.DB, grace, 10)
		require.NoError(t, err)
		require.Equal(t, lost, items[0].ID)
		require.Equal(t, 2, items[0].Reannounced)
	})
}

// Two instances on one database: one holds the lease and checks, the other
// does nothing, so the work and the repairs are not doubled; once the holder
// gives the lease up (its Stop), the other takes over.
func TestOneInstanceChecksAtATime(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := newFixture(t, db)
		lost := f.post(reservation.StatusWorking, -10*time.Minute, nil)
		f.reservation(lost, outbox.StatusSent, -9*time.Minute)
		ctx := context.Background()
		a, b := newChecker(t, db, "a", 3), newChecker(t, db, "b", 3)
		ra, err := a.RunOnce(ctx)
		require.NoError(t, err)
		rb, err := b.RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, ra.Leader)
		require.False(t, rb.Leader)
		require.Equal(t, overdue.Result{}, rb, "the other instance does nothing")
		require.Equal(t, 1, ra.Reannounced)

		require.NoError(t, a.Start(ctx))
		a.Stop() // gives the lease up
		rb, err = b.RunOnce(ctx)
		require.NoError(t, err)
		require.True(t, rb.Leader)
		require.Equal(t, 1, rb.Overdue)
	})
}
