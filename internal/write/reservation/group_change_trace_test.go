package reservation

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// queueWhileBusy runs each of writes in its own goroutine while the one
// committer's place of svc is held, waits until all of them are queued, and
// frees the place: one of them then commits the whole queue as one group.
// It returns the writes' errors, in order, once all were answered.
func queueWhileBusy(t *testing.T, svc *Service, writes ...func() error) []error {
	t.Helper()
	answers := startQueued(t, svc, writes...)
	errs := make([]error, len(writes))
	for i, a := range answers {
		errs[i] = <-a
	}
	return errs
}

// startQueued is queueWhileBusy that returns at once with a channel of
// each write's answer.
func startQueued(t *testing.T, svc *Service, writes ...func() error) []chan error {
	t.Helper()
	require.Equal(t, 1, cap(svc.groups.committers))
	svc.groups.committers <- struct{}{}
	answers := make([]chan error, len(writes))
	for i, w := range writes {
		answers[i] = make(chan error, 1)
		go func() { answers[i] <- w() }()
	}
	require.Eventually(t, func() bool {
		svc.groups.mu.Lock()
		defer svc.groups.mu.Unlock()
		return len(svc.groups.pending) == len(writes)
	}, 10*time.Second, time.Millisecond)
	<-svc.groups.committers
	return answers
}

// The event of an edit or cancel written in a group carries the trace of
// its own request, as the event of one written alone does, not the trace of
// whichever member's request committed the group.
func TestGroupedChangeEventCarriesItsOwnRequestsTrace(t *testing.T) {
	t.Parallel()
	const (
		traceA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traceB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc, err := NewService(db.DB, ServiceConfig{GroupCommitters: 1})
		require.NoError(t, err)
		var ids []int64
		for range 2 {
			p, err := svc.Create(context.Background(), CreateInput{Title: "t", Content: "c", ScheduledAt: svc.now().Add(time.Hour)})
			require.NoError(t, err)
			ids = append(ids, p.ID)
		}
		ctxA := telemetry.WithTraceparent(context.Background(), traceA)
		ctxB := telemetry.WithTraceparent(context.Background(), traceB)
		errs := queueWhileBusy(t, svc,
			func() error { _, err := svc.Update(ctxA, ids[0], UpdateInput{Title: new("edited")}); return err },
			func() error { _, err := svc.Cancel(ctxB, ids[1]); return err })
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		if db.Dialect == database.PostgreSQL {
			var txs []string
			require.NoError(t, db.Raw("SELECT DISTINCT xmin::text FROM posts WHERE id IN ?", ids).Scan(&txs).Error)
			require.Len(t, txs, 1, "the two changes were written in one group")
		}
		for i, want := range []string{traceA, traceB} {
			var events []outbox.Message
			require.NoError(t, db.Where("aggregate_id = ?", ids[i]).Order("id").Find(&events).Error)
			require.Len(t, events, 2)
			require.NotNil(t, events[1].Traceparent)
			require.Equal(t, want, *events[1].Traceparent, "post %d's change event", ids[i])
		}
	})
}
