package reservation

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Two changes of one post read at the same version, in one group: the
// first is written, the second refused alone with ErrConflict and no event,
// and the rest of the group commits with it (on PostgreSQL, in one
// transaction: the group was not written again one by one).
func TestGroupedChangeOfAPostThatMovedOnIsRefusedAlone(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc, err := NewService(db.DB, ServiceConfig{GroupCommitters: 1})
		require.NoError(t, err)
		now := svc.now()
		var ids []int64
		for i := range 5 {
			p, err := svc.Create(context.Background(), CreateInput{Title: fmt.Sprint("post ", i), Content: "c", ScheduledAt: now.Add(3600e9)})
			require.NoError(t, err)
			ids = append(ids, p.ID)
		}
		retitle := func(id int64, title string) *groupedWrite {
			current, err := postByID(db.DB, id)
			require.NoError(t, err)
			next := *current
			next.Title = title
			ch := &postChange{current: current, next: &next, changes: map[string]any{"title": title, "updated_at": now}, action: event.ActionUpdated}
			return &groupedWrite{ctx: context.Background(), postID: id, done: make(chan struct{}),
				fn: func(tx *gorm.DB) error { return writeChange(tx, ch, now) }}
		}
		// Both read at version 1, queued in this order.
		first, second := retitle(ids[0], "first"), retitle(ids[0], "second")
		queued := []*groupedWrite{first, second}
		for i, id := range ids[1:] {
			queued = append(queued, retitle(id, fmt.Sprint("changed ", i)))
		}
		svc.groups.pending = append(svc.groups.pending, queued[:len(queued)-1]...)
		last := queued[len(queued)-1]
		_, err = svc.groups.join(last) // the committer of the whole queue
		require.NoError(t, err)
		for _, c := range queued {
			<-c.done
		}
		require.NoError(t, first.err)
		require.ErrorIs(t, second.err, ErrConflict)
		stored, err := postByID(db.DB, ids[0])
		require.NoError(t, err)
		require.Equal(t, "first", stored.Title)
		require.EqualValues(t, 2, stored.Version.Int64)
		var events int64
		require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ?", ids[0]).Count(&events).Error)
		require.EqualValues(t, 2, events, "CREATED and the first change's UPDATED")
		for i, c := range queued[2:] {
			require.NoError(t, c.err)
			p, err := postByID(db.DB, ids[i+1])
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint("changed ", i), p.Title)
			require.EqualValues(t, 2, p.Version.Int64)
		}
		if db.Dialect == database.PostgreSQL {
			var txs []string
			require.NoError(t, db.Raw("SELECT DISTINCT xmin::text FROM posts WHERE id IN ?", ids).Scan(&txs).Error)
			require.Len(t, txs, 1, "the written changes committed in one transaction")
		}
	})
}
