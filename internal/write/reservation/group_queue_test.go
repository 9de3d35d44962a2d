package reservation

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

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
	in := func(title string) *CreateInput {
		return &CreateInput{Title: title, Content: "c", ScheduledAt: now.Add(time.Hour)}
	}
	ahead := []*groupedWrite{
		{ctx: context.Background(), in: in("a"), now: now, done: make(chan struct{})},
		{ctx: context.Background(), in: in("b"), now: now, done: make(chan struct{})},
	}
	svc.groups.pending = append(svc.groups.pending, ahead...)

	var post *Post
	var createErr error
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		post, createErr = svc.groups.create(context.Background(), *in("c"), now)
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

// A committer that panics while it writes its group (the API answers its
// own request 500) answers the other creates of the group with an error
// rather than leaving them waiting for ever.
func TestGroupedCreatesAreAnsweredWhenTheirCommitterPanics(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.SQLite)
	var panicked atomic.Bool
	databasetest.Before(t, db.DB, databasetest.StmtCreate, func(tx *gorm.DB) {
		if tx.Statement.Table == "posts" && panicked.CompareAndSwap(false, true) {
			panic("boom")
		}
	})
	svc, err := NewService(db.DB, ServiceConfig{GroupCommitters: 1})
	require.NoError(t, err)
	now := svc.now()
	in := func(title string) *CreateInput {
		return &CreateInput{Title: title, Content: "c", ScheduledAt: now.Add(time.Hour)}
	}
	others := []*groupedWrite{
		{ctx: context.Background(), in: in("a"), now: now, done: make(chan struct{})},
		{ctx: context.Background(), in: in("b"), now: now, done: make(chan struct{})},
	}
	svc.groups.pending = append(svc.groups.pending, others...)

	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_, _ = svc.groups.create(context.Background(), *in("c"), now)
	}()
	require.Equal(t, "boom", <-recovered, "the committer's own call panics")
	for _, c := range others {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("create %q of the panicked group is never answered", c.in.Title)
		}
		require.Error(t, c.err)
	}
	// The committer's place is free again: a later create is written.
	p, err := svc.groups.create(context.Background(), *in("d"), now)
	require.NoError(t, err)
	require.Equal(t, "d", loadTitle(t, db.DB, p.ID))
}

func loadTitle(t *testing.T, db *gorm.DB, id int64) string {
	t.Helper()
	var title string
	require.NoError(t, db.Model(&Post{}).Where("id = ?", id).Pluck("title", &title).Error)
	return title
}
