package reservation

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A request sent again with its key while the first is still queued (a
// client's retry) lands in the same group, whose transaction then fails on
// the key. Only that request is written alone, and replays the first's
// post: the rest of the group, other owners' creates, commit together
// still (on PostgreSQL, their posts carry one transaction id), instead of
// each in a transaction of its own, which any client could otherwise force
// on every group by sending each key twice at once.
func TestGroupWithOneKeyTwiceCommitsItsOtherWritesTogether(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc, err := NewService(db.DB, ServiceConfig{GroupCommitters: 1})
		require.NoError(t, err)
		alice := WithScope(context.Background(), Scope{OwnerID: "alice"})
		bob := WithScope(context.Background(), Scope{OwnerID: "bob"})
		at := svc.now().Add(time.Hour)
		in := CreateInput{Title: "keyed", Content: "c", ScheduledAt: at}

		var keyed [2]Created
		bobs := make([]*Post, 4)
		writes := []func() error{func() (err error) { keyed[0], err = svc.CreateOnce(alice, "retried", in); return err }}
		for i := range bobs {
			writes = append(writes, func() (err error) {
				bobs[i], err = svc.Create(bob, CreateInput{Title: "bob's", Content: "c", ScheduledAt: at})
				return err
			})
		}
		writes = append(writes, func() (err error) { keyed[1], err = svc.CreateOnce(alice, "retried", in); return err })
		answers := startQueued(t, svc, writes...)
		for _, a := range answers {
			require.NoError(t, <-a)
		}
		require.Equal(t, keyed[0].Post.ID, keyed[1].Post.ID, "one post for the key")
		require.NotEqual(t, keyed[0].Replayed, keyed[1].Replayed, "one of the two replays the other")
		var n int64
		require.NoError(t, db.Model(&Post{}).Count(&n).Error)
		require.EqualValues(t, 1+len(bobs), n)
		if db.Dialect == database.PostgreSQL {
			ids := []int64{keyed[0].Post.ID}
			for _, p := range bobs {
				ids = append(ids, p.ID)
			}
			var txs []string
			require.NoError(t, db.Raw("SELECT DISTINCT xmin::text FROM posts WHERE id IN ?", ids).Scan(&txs).Error)
			require.Len(t, txs, 1, "the group's other writes committed together")
		}
	})
}
