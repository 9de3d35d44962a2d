package overdue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/operate/overdue/overduetest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// List names each overdue post's reason from its events and publication,
// longest overdue first, leaves out the posts within the grace or final,
// and counts all of them in the summary even past the limit.
func TestListSaysWhyEachPostIsStuck(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := overduetest.Seed(t, db)
		posts, sum, err := overdue.List(t.Context(), db.DB, overduetest.Grace, 100)
		require.NoError(t, err)
		require.Equal(t, len(f.Overdue), sum.Count)
		// The database clock moved on since Seed: a few seconds at most.
		require.InDelta(t, f.Ages[0].Seconds(), sum.Oldest.Seconds(), 30)
		require.Len(t, posts, len(f.Overdue))
		for i, p := range posts {
			require.Equal(t, f.Overdue[i], p.ID, "longest overdue first")
			require.Equal(t, f.Reasons[i], p.Reason, "post %d", p.ID)
			require.InDelta(t, f.Ages[i].Seconds(), p.Overdue.Seconds(), 30, "post %d", p.ID)
			require.Equal(t, time.UTC, p.ScheduledAt.Location())
		}
		byReason := map[overdue.Reason]overdue.Post{}
		for _, p := range posts {
			byReason[p.Reason] = p
		}
		require.Equal(t, outbox.Status(""), byReason[overdue.ReasonNotReserved].EventStatus)
		require.Equal(t, outbox.StatusRetry, byReason[overdue.ReasonEventUnsent].EventStatus)
		require.Equal(t, "kafka: broker not available", byReason[overdue.ReasonEventUnsent].Detail)
		require.Equal(t, "kafka: message too large", byReason[overdue.ReasonEventFailed].Detail)
		require.Equal(t, 2, byReason[overdue.ReasonNoPublication].Reannounced)
		require.Equal(t, outbox.StatusSent, byReason[overdue.ReasonNoPublication].EventStatus)
		pending := byReason[overdue.ReasonPublicationPending]
		require.Equal(t, "PENDING", pending.PublicationStatus)
		require.Equal(t, 3, pending.PublicationAttempts)
		require.Equal(t, overduetest.ReceiverError, pending.Detail, "the receiver's text as stored")
		require.Equal(t, "FAILED", byReason[overdue.ReasonPublicationFailed].PublicationStatus)
		require.Equal(t, "PUBLISHED", byReason[overdue.ReasonPublicationSettled].PublicationStatus)

		// A limit cuts the list, not the summary.
		posts, sum, err = overdue.List(t.Context(), db.DB, overduetest.Grace, 2)
		require.NoError(t, err)
		require.Len(t, posts, 2)
		require.Equal(t, f.Overdue[:2], []int64{posts[0].ID, posts[1].ID})
		require.Equal(t, len(f.Overdue), sum.Count)
	})
}
