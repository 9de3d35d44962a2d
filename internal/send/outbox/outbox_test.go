package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

const shapeID = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"

// The outbox checks the shape of an event, not what it says: any type of
// the right length is taken, and the payload is kept as it is.
func TestNewMessageChecksTheShape(t *testing.T) {
	t.Parallel()
	good := outbox.Event{ID: shapeID, Type: "ORDER_SHIPPED", AggregateID: 7, OccurredAt: t0,
		Payload: json.RawMessage(` {"any":"thing"}`), DedupKey: "k"}
	m, err := outbox.NewMessage(good)
	require.NoError(t, err)
	require.Equal(t, shapeID, m.EventID)
	require.Equal(t, "ORDER_SHIPPED", m.EventType)
	require.Equal(t, int64(7), m.AggregateID)
	require.Equal(t, "7", m.Key())
	require.Equal(t, ` {"any":"thing"}`, m.Payload)
	require.Equal(t, outbox.StatusPending, m.Status)
	require.Equal(t, int64(1), m.Version)
	require.True(t, m.Created.Equal(t0))
	require.True(t, m.NextAttemptAt.Equal(t0))
	require.Equal(t, "k", *m.DedupKey)

	for name, change := range map[string]func(*outbox.Event){
		"no id":              func(e *outbox.Event) { e.ID = "" },
		"id not a UUID":      func(e *outbox.Event) { e.ID = "event-1" },
		"id not canonical":   func(e *outbox.Event) { e.ID = strings.ToUpper(shapeID) },
		"no type":            func(e *outbox.Event) { e.Type = "" },
		"type too long":      func(e *outbox.Event) { e.Type = strings.Repeat("T", outbox.MaxTypeLength+1) },
		"aggregate id 0":     func(e *outbox.Event) { e.AggregateID = 0 },
		"negative aggregate": func(e *outbox.Event) { e.AggregateID = -3 },
		"no occurrence time": func(e *outbox.Event) { e.OccurredAt = time.Time{} },
		"no payload":         func(e *outbox.Event) { e.Payload = nil },
		"payload not JSON":   func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":`) },
		"payload an array":   func(e *outbox.Event) { e.Payload = json.RawMessage(`[{"a":1}]`) },
		"payload a string":   func(e *outbox.Event) { e.Payload = json.RawMessage(`"{}"`) },
		"traceparent broken": func(e *outbox.Event) { e.Traceparent = "00-zz-broken-01" },
		"traceparent upper":  func(e *outbox.Event) { e.Traceparent = strings.ToUpper(testTraceparentA) },
		"traceparent long":   func(e *outbox.Event) { e.Traceparent = testTraceparentA + "-extra" },
		"traceparent v01":    func(e *outbox.Event) { e.Traceparent = "01" + testTraceparentA[2:] },
	} {
		t.Run(name, func(t *testing.T) {
			ev := good
			change(&ev)
			_, err := outbox.NewMessage(ev)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		})
	}
	long := good
	long.Type = strings.Repeat("T", outbox.MaxTypeLength)
	_, err = outbox.NewMessage(long)
	require.NoError(t, err, "a type of MaxTypeLength bytes fits")
}

// Three W3C traceparents of different traces.
const (
	testTraceparentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTraceparentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	testTraceparentC = "00-11111111111111111111111111111111-2222222222222222-01"
)

func traceEvent(aggregateID int64, traceparent string) outbox.Event {
	return outbox.Event{ID: uuid.NewString(), Type: string(event.PostingEvent), AggregateID: aggregateID,
		OccurredAt: t0, Payload: json.RawMessage(`{}`), Traceparent: traceparent}
}

// traceparents reads the stored traceparent of every row, in id order ("" for
// NULL).
func (o *bundle) traceparents(t *testing.T) []string {
	t.Helper()
	var rows []outbox.Message
	require.NoError(t, o.db.Order("id").Find(&rows).Error)
	out := make([]string, len(rows))
	for i, r := range rows {
		if r.Traceparent != nil {
			out[i] = *r.Traceparent
		}
	}
	return out
}

// AppendMany writes events of several traces in one statement: each row
// stores its own event's traceparent, not the transaction's, and an event
// without one stores none.
func TestAppendManyStoresEachEventsTraceparent(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := telemetry.WithTraceparent(context.Background(), testTraceparentC)
		evs := []outbox.Event{traceEvent(1, testTraceparentA), traceEvent(2, ""), traceEvent(3, testTraceparentB), traceEvent(1, testTraceparentB)}
		var msgs []outbox.Message
		require.NoError(t, database.Transaction(ctx, o.db.DB, func(tx *gorm.DB) error {
			var err error
			msgs, err = outbox.AppendMany(tx, evs)
			return err
		}))
		require.Len(t, msgs, len(evs))
		want := []string{testTraceparentA, "", testTraceparentB, testTraceparentB}
		require.Equal(t, want, o.traceparents(t))
		for i, m := range msgs {
			got := ""
			if m.Traceparent != nil {
				got = *m.Traceparent
			}
			require.Equal(t, want[i], got, "returned row %d", i)
		}
	})
}

// AppendMany refuses a batch with a broken traceparent before writing any of
// it.
func TestAppendManyRefusesABrokenTraceparent(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		_, err := outbox.AppendMany(o.db.DB, []outbox.Event{traceEvent(1, testTraceparentA), traceEvent(2, "00-zz-broken-01")})
		require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		require.Empty(t, o.remaining(t))
	})
}

// Append stores an event's own traceparent as it is; without one it keeps
// storing the trace context of the transaction's context (here, with the
// no-op tracer, that context itself), and with neither, none.
func TestAppendStoresTheEventsTraceparentOrTheContexts(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := telemetry.WithTraceparent(context.Background(), testTraceparentC)
		tx := o.db.DB.WithContext(ctx)
		_, err := outbox.Append(tx, traceEvent(1, testTraceparentA))
		require.NoError(t, err)
		_, err = outbox.Append(tx, traceEvent(1, ""))
		require.NoError(t, err)
		_, err = outbox.Append(o.db.DB.WithContext(context.Background()), traceEvent(1, ""))
		require.NoError(t, err)
		require.Equal(t, []string{testTraceparentA, testTraceparentC, ""}, o.traceparents(t))
	})
}

// Announce belongs after the commit: inside a transaction it would make
// that transaction's commit take PostgreSQL's notification lock, so it is
// refused there, and the transaction is left to its caller.
func TestAnnounceRefusesToRunInsideATransaction(t *testing.T) {
	t.Parallel()
	db := databasetest.NewPostgres(t)
	require.NoError(t, outbox.Announce(db.DB, ""))
	err := database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
		return outbox.Announce(tx, "")
	})
	require.ErrorIs(t, err, outbox.ErrAnnounceInTransaction)
	// MySQL and SQLite have no signal: nothing to send, nothing refused.
	require.NoError(t, outbox.Announce(databasetest.NewSQLite(t).DB, ""))
}
