package reservation

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A group of creates of the longest content holds more bytes than MariaDB
// takes in one statement (max_allowed_packet, 16 MiB by default): the
// group's posts go in several INSERTs of its transaction, none refused (a
// refused group would be written again one create a transaction).
func TestGroupedCreatesOfTheLongestContentGoInStatementsTheServerTakes(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		var inserts, refused atomic.Int64
		require.NoError(t, db.Callback().Create().After("gorm:create").Register("test:count_post_inserts", func(tx *gorm.DB) {
			switch {
			case tx.Statement.Table != "posts":
			case tx.Error != nil:
				refused.Add(1)
			default:
				inserts.Add(1)
			}
		}))
		const n = 300
		svc, err := NewService(db.DB, ServiceConfig{GroupSize: n, GroupCommitters: 1})
		require.NoError(t, err)
		// 300 posts of 20,000 four-byte characters: 24 MB of content.
		long := strings.Repeat("\U0001D11E", MaxContentLength)
		now := svc.now()
		queued := make([]*groupedWrite, n)
		for i := range queued {
			queued[i] = &groupedWrite{ctx: context.Background(), now: now, done: make(chan struct{}),
				in: &CreateInput{Title: fmt.Sprint("long ", i), Content: long, ScheduledAt: now.Add(3600e9)}}
		}
		svc.groups.pending = append(svc.groups.pending, queued[:n-1]...)
		_, err = svc.groups.join(queued[n-1]) // the committer of the whole queue
		require.NoError(t, err)
		ids := make([]int64, n)
		for i, c := range queued {
			<-c.done
			require.NoError(t, c.err, "create %d", i)
			ids[i] = c.post.ID
		}
		require.Zero(t, refused.Load(), "INSERTs of posts the database refused")
		require.Less(t, inserts.Load(), int64(n/10), "INSERTs of posts: the group was written one create a transaction")
		var stored int64
		require.NoError(t, db.Table("posts").Where("id IN ? AND content = ?", ids, long).Count(&stored).Error)
		require.EqualValues(t, n, stored)
	})
}
