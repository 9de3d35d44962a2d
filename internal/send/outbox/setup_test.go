package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

var t0 = clocktest.T0

// bundle is what an outbox test works with: a fresh database and a store
// on it.
type bundle struct {
	db    *database.DB
	store *outbox.Store
}

func setup(t *testing.T, db *database.DB) *bundle {
	t.Helper()
	return &bundle{db: db, store: outbox.NewStore(db)}
}

// each runs fn in parallel on a fresh bundle of each dialect.
func each(t *testing.T, fn func(t *testing.T, o *bundle)) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) { fn(t, setup(t, db)) })
}

// append writes one event per aggregate id, in the given order and a
// millisecond apart from at, and returns the rows.
func (o *bundle) append(t *testing.T, at time.Time, aggregateIDs ...int64) []outbox.Message {
	t.Helper()
	var out []outbox.Message
	for i, id := range aggregateIDs {
		out = append(out, reservationtest.Append(t, o.db.DB, id, at.Add(time.Duration(i)*time.Millisecond)))
	}
	return out
}

// row reads one outbox row as stored.
func (o *bundle) row(t *testing.T, id int64) outbox.Message {
	t.Helper()
	return databasetest.Load[outbox.Message](t, o.db.DB, id)
}

// set forces a row into a status, as the relay would have left it.
func (o *bundle) set(t *testing.T, id int64, status outbox.Status, sentAt *time.Time) {
	t.Helper()
	values := map[string]any{"status": status, "sent_at": sentAt}
	if status == outbox.StatusFail {
		values["retry_count"] = 4
		values["last_error"] = "broker rejected: record too large"
	}
	if status == outbox.StatusProcessing {
		values["claimed_by"] = "other"
		values["claimed_at"] = t0
	}
	require.NoError(t, o.db.Model(&outbox.Message{}).Where("id = ?", id).Updates(values).Error)
}

// remaining are the ids of the rows left, in id order.
func (o *bundle) remaining(t *testing.T) []int64 {
	t.Helper()
	var got []int64
	require.NoError(t, o.db.Model(&outbox.Message{}).Order("id").Pluck("id", &got).Error)
	return got
}

func ids(msgs []outbox.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
