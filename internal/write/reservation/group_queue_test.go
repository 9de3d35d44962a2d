package reservation

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A create that takes a committer's place while the creates queued ahead
// of it fill a whole group writes that group and then its own: it does not
// wait for a later create to come and write it. (The creates ahead here
// are answered without taking a place, as their callers are when their
// answer and a free place arrive together and they pick the answer.)
func TestGroupedCreateQueuedBeyondAFullGroupIsStillWritten(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.SQLite)
	svc, err := NewService(db.DB, ServiceConfig{GroupSize: 2, GroupCommitters: 1})
	require.NoError(t, err)
	now := svc.now()
	in := func(title string) CreateInput {
		return CreateInput{Title: title, Content: "c", ScheduledAt: now.Add(time.Hour)}
	}
	ahead := []*groupedCreate{
		{ctx: context.Background(), in: in("a"), now: now, done: make(chan struct{})},
		{ctx: context.Background(), in: in("b"), now: now, done: make(chan struct{})},
	}
	svc.groups.pending = append(svc.groups.pending, ahead...)

	var post *Post
	var createErr error
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		post, createErr = svc.groups.create(context.Background(), in("c"), now)
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("the create queued behind a full group is never written")
	}
	require.NoError(t, createErr)
	for _, c := range ahead {
		<-c.done
		require.NoError(t, c.err)
	}
	var titles []string
	require.NoError(t, db.Model(&Post{}).Order("id").Pluck("title", &titles).Error)
	require.Equal(t, []string{"a", "b", "c"}, titles)
	require.Equal(t, "c", post.Title)
}
