// Package overduetest writes posts stuck at each link of the chain, one per
// overdue.Reason, for the tests of what lists them (the overdue package,
// posting posts overdue, GET /admin/posts/overdue, the console).
package overduetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// ReceiverError is the last error of the PENDING publication: a webhook
// receiver's answer with terminal control sequences in it (a colour, a
// carriage return that would overwrite the line, a bell, a title change).
const ReceiverError = "webhook answered 503: \x1b[31mdown\x1b[0m\r\nretry later\a\x1b]0;pwned\x07"

// Fixture is what Seed wrote.
type Fixture struct {
	// Now is the database's clock when Seed began.
	Now time.Time
	// Overdue are the overdue posts' ids, longest overdue first, one per
	// reason in the order of Reasons.
	Overdue []int64
	// Reasons are the reasons of Overdue, in its order.
	Reasons []overdue.Reason
	// Ages are how long before Now each of Overdue was scheduled.
	Ages []time.Duration
	// Quiet are posts that are not overdue: a WORKING one within the
	// grace, and older PUBLISHED, CANCELLED and EXPIRED ones.
	Quiet []int64
	// Reannounced is the id of the post re-announced twice (the
	// no_publication one).
	Reannounced int64
}

// Grace is the grace the fixture is made for: the post within the grace
// was scheduled a minute ago, the overdue ones hours ago.
const Grace = 5 * time.Minute

// Seed writes into db (migrated, empty) one overdue post per reason, the
// events and publications that make that reason, and posts that are not
// overdue.
func Seed(t testing.TB, db *database.DB) *Fixture {
	t.Helper()
	ctx := context.Background()
	now, err := database.Now(ctx, db.DB)
	require.NoError(t, err)
	f := &Fixture{Now: now}
	post := func(status reservation.Status, ago time.Duration, reannounced int) int64 {
		at := database.Normalize(now.Add(-ago))
		p := &reservation.Post{Title: "stuck " + string(status), Content: "c", Status: status, ScheduledAt: at,
			CreatedAt: at.Add(-time.Hour), UpdatedAt: at, OwnerID: "owner-" + strconv.Itoa(int(ago/time.Minute)),
			Reannounced: reannounced}
		require.NoError(t, db.Create(p).Error)
		return p.ID
	}
	reservationEvent := func(id int64, status outbox.Status, lastError string) {
		m, err := outbox.Append(db.DB, reservationtest.Outbox(t, event.ReservationEvent, id, now.Add(-3*time.Hour), nil))
		require.NoError(t, err)
		values := map[string]any{"status": status}
		if lastError != "" {
			values["last_error"] = lastError
		}
		if status == outbox.StatusSent {
			values["sent_at"] = database.Normalize(now.Add(-2 * time.Hour))
		}
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", m.ID).Updates(values).Error)
	}
	publication := func(id int64, status worker.PublicationStatus, attempts int, lastError string) {
		row := worker.Publication{PostID: id, EventID: "0193a1b2-0000-7000-8000-" + strconv.FormatInt(100000000000+id, 10),
			ScheduledAt: database.Normalize(now.Add(-time.Hour)), Status: status, Attempts: attempts,
			CreatedAt: database.Normalize(now), UpdatedAt: database.Normalize(now)}
		if lastError != "" {
			row.LastError = &lastError
		}
		require.NoError(t, db.Create(&row).Error)
	}
	add := func(reason overdue.Reason, ago time.Duration, id int64) {
		f.Overdue, f.Reasons, f.Ages = append(f.Overdue, id), append(f.Reasons, reason), append(f.Ages, ago)
	}

	add(overdue.ReasonNotReserved, 7*time.Hour, post(reservation.StatusReserved, 7*time.Hour, 0))
	id := post(reservation.StatusWorking, 6*time.Hour, 0)
	reservationEvent(id, outbox.StatusRetry, "kafka: broker not available")
	add(overdue.ReasonEventUnsent, 6*time.Hour, id)
	id = post(reservation.StatusWorking, 5*time.Hour, 0)
	reservationEvent(id, outbox.StatusFail, "kafka: message too large")
	add(overdue.ReasonEventFailed, 5*time.Hour, id)
	id = post(reservation.StatusWorking, 4*time.Hour, 2)
	reservationEvent(id, outbox.StatusSent, "")
	reservationEvent(id, outbox.StatusSent, "") // a re-announcement
	add(overdue.ReasonNoPublication, 4*time.Hour, id)
	f.Reannounced = id
	id = post(reservation.StatusWorking, 3*time.Hour, 0)
	reservationEvent(id, outbox.StatusSent, "")
	publication(id, worker.PublicationPending, 3, ReceiverError)
	add(overdue.ReasonPublicationPending, 3*time.Hour, id)
	id = post(reservation.StatusWorking, 2*time.Hour, 0)
	reservationEvent(id, outbox.StatusSent, "")
	publication(id, worker.PublicationFailed, 1, "webhook refused: 422 Unprocessable Entity")
	add(overdue.ReasonPublicationFailed, 2*time.Hour, id)
	id = post(reservation.StatusWorking, time.Hour, 0)
	reservationEvent(id, outbox.StatusSent, "")
	publication(id, worker.PublicationPublished, 0, "")
	add(overdue.ReasonPublicationSettled, time.Hour, id)

	f.Quiet = append(f.Quiet, post(reservation.StatusWorking, time.Minute, 0),
		post(reservation.StatusPublished, 8*time.Hour, 0), post(reservation.StatusCancelled, 8*time.Hour, 0),
		post(reservation.StatusExpired, 8*time.Hour, 0))
	return f
}
