package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// adminPost writes a post of status and its publication of pubStatus, due a
// minute ago, as the worker leaves a refused one: attempts 1, last_error set.
func adminPost(t *testing.T, db *gorm.DB, status reservation.Status, pubStatus PublicationStatus) int64 {
	t.Helper()
	now := database.Normalize(time.Now())
	due := now.Add(-time.Minute)
	p := &reservation.Post{Title: "t", Content: "c", Status: status, ScheduledAt: due, CreatedAt: now, UpdatedAt: now}
	require.NoError(t, db.Create(p).Error)
	msg := fmt.Sprintf("webhook refused post %d: 422 Unprocessable Entity", p.ID)
	pub := Publication{PostID: p.ID, EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", p.ID), PartitionID: 3,
		ScheduledAt: due, Status: pubStatus, CreatedAt: now, UpdatedAt: now}
	if pubStatus == PublicationFailed {
		pub.Attempts, pub.LastError = 1, &msg
	}
	require.NoError(t, db.Create(&pub).Error)
	return p.ID
}

func adminLoad(t *testing.T, db *gorm.DB, postID int64) Publication {
	t.Helper()
	return databasetest.Load[Publication](t, db, postID)
}

func TestListPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		f1 := adminPost(t, db.DB, reservation.StatusWorking, PublicationFailed)
		pending := adminPost(t, db.DB, reservation.StatusWorking, PublicationPending)
		f2 := adminPost(t, db.DB, reservation.StatusCancelled, PublicationFailed)
		f3 := adminPost(t, db.DB, reservation.StatusWorking, PublicationFailed)
		require.NoError(t, db.Delete(&reservation.Post{}, f3).Error) // a publication whose post is gone

		got, err := ListPublications(ctx, db.DB, PublicationFailed, 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 3)
		require.Equal(t, []int64{f1, f2, f3}, []int64{got[0].PostID, got[1].PostID, got[2].PostID})
		require.Equal(t, PublicationFailed, got[0].Status)
		require.Equal(t, 1, got[0].Attempts)
		require.NotNil(t, got[0].LastError)
		require.Contains(t, *got[0].LastError, "422 Unprocessable Entity")
		require.Equal(t, int32(3), got[0].PartitionID)
		require.Equal(t, time.UTC, got[0].ScheduledAt.Location())
		require.Equal(t, reservation.StatusWorking, got[0].PostStatus)
		require.Equal(t, reservation.StatusCancelled, got[1].PostStatus)
		require.Equal(t, reservation.Status(""), got[2].PostStatus)

		// Paging by the last post id, and the limit.
		page, err := ListPublications(ctx, db.DB, PublicationFailed, 1, f1)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, f2, page[0].PostID)

		got, err = ListPublications(ctx, db.DB, PublicationPending, 10, 0)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, pending, got[0].PostID)
		require.Nil(t, got[0].LastError)

		got, err = ListPublications(ctx, db.DB, PublicationPublished, 10, 0)
		require.NoError(t, err)
		require.Empty(t, got)
		require.NotNil(t, got, "an empty list, not null, for JSON")

		_, err = ListPublications(ctx, db.DB, "DONE", 10, 0)
		require.ErrorIs(t, err, ErrInvalidPublicationStatus)
		_, err = ListPublications(ctx, db.DB, PublicationFailed, MaxPublicationListLimit+1, 0)
		require.Error(t, err)
	})
}

func TestParsePublicationStatus(t *testing.T) {
	t.Parallel()
	st, err := ParsePublicationStatus(" failed ")
	require.NoError(t, err)
	require.Equal(t, PublicationFailed, st)
	_, err = ParsePublicationStatus("FAIL")
	require.ErrorIs(t, err, ErrInvalidPublicationStatus)
	require.ErrorContains(t, err, "PENDING, PUBLISHED, CANCELLED, EXPIRED, FAILED")
}

func TestRetryPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		failed := adminPost(t, db.DB, reservation.StatusWorking, PublicationFailed)
		cancelled := adminPost(t, db.DB, reservation.StatusCancelled, PublicationFailed)
		pending := adminPost(t, db.DB, reservation.StatusWorking, PublicationPending)
		published := adminPost(t, db.DB, reservation.StatusPublished, PublicationPublished)
		before := adminLoad(t, db.DB, cancelled)
		dbNow, err := database.Now(ctx, db.DB)
		require.NoError(t, err)

		res := RetryPublications(ctx, db.DB, []int64{failed, cancelled, failed, pending, published, 999999})
		require.Len(t, res, 5, "one result per id, duplicates once")
		require.Equal(t, []int64{failed, cancelled, pending, published, 999999},
			[]int64{res[0].PostID, res[1].PostID, res[2].PostID, res[3].PostID, res[4].PostID})

		require.NoError(t, res[0].Err)
		require.Equal(t, PublicationPending, res[0].Publication.Status)
		row := adminLoad(t, db.DB, failed)
		require.Equal(t, PublicationPending, row.Status)
		require.Equal(t, 0, row.Attempts)
		require.Nil(t, row.LastError)
		// updated_at comes from the database's clock (SQLite: milliseconds).
		require.WithinDuration(t, dbNow, row.UpdatedAt, time.Minute)
		require.False(t, row.UpdatedAt.Before(dbNow.Truncate(time.Millisecond)))

		require.ErrorIs(t, res[1].Err, ErrPostNotWorking)
		require.ErrorContains(t, res[1].Err, "post is CANCELLED")
		require.Equal(t, before, adminLoad(t, db.DB, cancelled), "refused: unchanged")
		require.ErrorIs(t, res[2].Err, ErrPublicationNotFailed)
		require.ErrorContains(t, res[2].Err, "publication is PENDING")
		require.ErrorIs(t, res[3].Err, ErrPublicationNotFailed)
		require.Equal(t, PublicationPublished, adminLoad(t, db.DB, published).Status)
		require.ErrorIs(t, res[4].Err, ErrPublicationNotFound)
		var pe *PublicationError
		require.ErrorAs(t, res[4].Err, &pe)
		require.Equal(t, "not found", pe.Reason)

		// A second retry of the same row finds it PENDING.
		again := RetryPublications(ctx, db.DB, []int64{failed})
		require.ErrorIs(t, again[0].Err, ErrPublicationNotFailed)
	})
}

// The write is fenced by what it read: a worker that failed the post again,
// or a post cancelled, between the read and the write makes it refuse and
// leaves the row as it was; unchanged since the read, the same fence lets it
// through (the times read back compare equal on both dialects).
func TestRetryPublicationsFenced(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(t *testing.T, db *gorm.DB, read PublicationEntry) // between the read and the write; nil: none
	}{
		// Another operator retried it and the worker failed it again, with
		// the same number of attempts: only updated_at tells.
		{"failed again, same attempts", func(t *testing.T, db *gorm.DB, read PublicationEntry) {
			require.NoError(t, db.Model(&Publication{}).Where("post_id = ?", read.PostID).
				Update("updated_at", database.Normalize(read.UpdatedAt.Add(time.Second))).Error)
		}},
		{"attempts moved", func(t *testing.T, db *gorm.DB, read PublicationEntry) {
			require.NoError(t, db.Model(&Publication{}).Where("post_id = ?", read.PostID).Update("attempts", 2).Error)
		}},
		{"post cancelled", func(t *testing.T, db *gorm.DB, read PublicationEntry) {
			require.NoError(t, db.Model(&reservation.Post{}).Where("id = ?", read.PostID).Update("status", reservation.StatusCancelled).Error)
		}},
		{"unchanged", nil},
	}
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				id := adminPost(t, db.DB, reservation.StatusWorking, PublicationFailed)
				read, err := GetPublication(ctx, db.DB, id)
				require.NoError(t, err)
				if c.change == nil {
					now, err := database.Now(ctx, db.DB)
					require.NoError(t, err)
					got, err := retryAsRead(ctx, db.DB, read, now)
					require.NoError(t, err)
					require.Equal(t, PublicationPending, got.Status)
					require.Equal(t, PublicationPending, adminLoad(t, db.DB, id).Status)
					return
				}
				c.change(t, db.DB, read)
				changed := adminLoad(t, db.DB, id)
				now, err := database.Now(ctx, db.DB)
				require.NoError(t, err)
				_, err = retryAsRead(ctx, db.DB, read, now)
				require.ErrorIs(t, err, ErrPublicationConflict)
				require.Equal(t, changed, adminLoad(t, db.DB, id), "not overwritten")
				require.Equal(t, PublicationFailed, adminLoad(t, db.DB, id).Status)
			})
		}
	})
}

// switchable refuses while refuse is set, then publishes.
type switchable struct {
	refuse    atomic.Bool
	published atomic.Int32
}

func (s *switchable) Publish(_ context.Context, p Publishing) error {
	if s.refuse.Load() {
		return fmt.Errorf("%w: 422 Unprocessable Entity", ErrRefused)
	}
	s.published.Add(1)
	return nil
}

// A refused publication, retried by an operator, is published by the worker
// that arms it.
func TestRetriedPublicationIsPublished(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		ctx := context.Background()
		id := adminPost(t, db.DB, reservation.StatusWorking, PublicationPending)
		pub := &switchable{}
		pub.refuse.Store(true)
		w, err := New(db.DB, Config{Publisher: pub, Logger: slog.New(slog.DiscardHandler),
			RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(w.Stop)

		st, err := w.PublishDue(ctx, id)
		require.NoError(t, err)
		require.Equal(t, PublicationFailed, st)
		failed, err := ListPublications(ctx, db.DB, PublicationFailed, 0, 0)
		require.NoError(t, err)
		require.Len(t, failed, 1)
		require.Contains(t, *failed[0].LastError, "422")

		pub.refuse.Store(false)
		res := RetryPublications(ctx, db.DB, []int64{id})
		require.NoError(t, res[0].Err)
		require.NoError(t, w.Assigned(ctx, "posting-events", []int32{3}))
		require.Eventually(t, func() bool { return adminLoad(t, db.DB, id).Status == PublicationPublished },
			30*time.Second, 20*time.Millisecond)
		require.Equal(t, int32(1), pub.published.Load())
		var post reservation.Post
		require.NoError(t, db.First(&post, id).Error)
		require.Equal(t, reservation.StatusPublished, post.Status)
		require.True(t, errors.Is(RetryPublications(ctx, db.DB, []int64{id})[0].Err, ErrPublicationNotFailed))
	})
}
