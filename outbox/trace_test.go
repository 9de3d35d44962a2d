package outbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/telemetry"
)

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
