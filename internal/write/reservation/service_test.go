package reservation_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// svcStart is the service clock's start; its nanoseconds show that stored
// times are normalized to microseconds.
var svcStart = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)

// serviceBundle is what a service test works with: a fresh database, a
// service on it and the clock the service reads, standing at svcStart.
type serviceBundle struct {
	db    *database.DB
	svc   *reservation.Service
	clock *clocktest.Clock
}

// eachService runs fn in parallel on a serviceBundle of each dialect.
func eachService(t *testing.T, fn func(t *testing.T, e *serviceBundle)) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		clock := clocktest.New(svcStart)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{Now: clock.Now})
		require.NoError(t, err)
		fn(t, &serviceBundle{db: db, svc: svc, clock: clock})
	})
}

func (e *serviceBundle) create(t *testing.T, title string) *reservation.Post {
	t.Helper()
	p, err := e.svc.Create(context.Background(), reservation.CreateInput{
		Title: title, Content: "content of " + title, ScheduledAt: svcStart.Add(24 * time.Hour),
	})
	require.NoError(t, err)
	return p
}

// setStatus changes a post's status behind the service's back, as the
// scheduler or the worker would.
func (e *serviceBundle) setStatus(t *testing.T, id int64, st reservation.Status) {
	t.Helper()
	require.NoError(t, e.db.Exec("UPDATE posts SET status = ? WHERE id = ?", st, id).Error)
}

func (e *serviceBundle) load(t *testing.T, id int64) reservation.Post {
	t.Helper()
	return loadPost(t, e.db.DB, id)
}

// loadPost reads a post as stored.
func loadPost(t *testing.T, db *gorm.DB, id int64) reservation.Post {
	t.Helper()
	return databasetest.Load[reservation.Post](t, db, id)
}

// counts returns the numbers of posts and outbox rows.
func (e *serviceBundle) counts(t *testing.T) (posts, rows int64) {
	t.Helper()
	require.NoError(t, e.db.Model(&reservation.Post{}).Count(&posts).Error)
	require.NoError(t, e.db.Model(&outbox.Message{}).Count(&rows).Error)
	return posts, rows
}

// events returns the outbox rows of a post in write order.
func (e *serviceBundle) events(t *testing.T, postID int64) []outbox.Message {
	t.Helper()
	var msgs []outbox.Message
	require.NoError(t, e.db.Where("aggregate_id = ?", postID).Order("id").Find(&msgs).Error)
	return msgs
}

// walk pages through the list of q to its end and returns the ids and the
// number of pages; every page respects the limit and the status filter.
func (e *serviceBundle) walk(t *testing.T, q reservation.ListQuery) (ids []int64, pages int) {
	t.Helper()
	for {
		page, err := e.svc.List(context.Background(), q)
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(page.Items), max(q.Limit, 1))
		for _, p := range page.Items {
			if q.Status != "" {
				require.Equal(t, q.Status, p.Status)
			}
			ids = append(ids, p.ID)
		}
		if page.NextCursor == "" {
			return ids, pages
		}
		q.Cursor = page.NextCursor
		require.Less(t, pages, 20, "pagination does not end")
	}
}

// requireEvent checks one POSTING_EVENT row against the post it announces.
func requireEvent(t *testing.T, msg outbox.Message, p *reservation.Post, action event.Action, at time.Time) {
	t.Helper()
	require.Equal(t, string(event.PostingEvent), msg.EventType)
	require.Equal(t, p.ID, msg.AggregateID)
	require.Equal(t, outbox.StatusPending, msg.Status)
	var payload map[string]any
	require.NoError(t, json.Unmarshal([]byte(msg.Payload), &payload))
	require.Equal(t, string(action), payload["action"])
	require.Equal(t, string(p.Status), payload["status"])
	require.Equal(t, msg.EventID, payload["eventId"])
	require.Equal(t, string(event.PostingEvent), payload["eventType"])
	require.EqualValues(t, p.ID, payload["postId"])
	scheduled, err := time.Parse(time.RFC3339Nano, payload["scheduledAt"].(string))
	require.NoError(t, err)
	require.True(t, scheduled.Equal(p.ScheduledAt), "scheduledAt %s, want %s", scheduled, p.ScheduledAt)
	occurred, err := time.Parse(time.RFC3339Nano, payload["occurredAt"].(string))
	require.NoError(t, err)
	require.True(t, occurred.Equal(database.Normalize(at)), "occurredAt %s, want %s", occurred, at)
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, reservation.ErrInvalidInput)
	var ve *reservation.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, field, ve.Field)
}

// onPostRead runs fn after each read of the posts table while armed is
// set: the moment between the service's read and its write.
func (e *serviceBundle) onPostRead(t *testing.T, armed *atomic.Bool, fn func()) {
	t.Helper()
	databasetest.After(t, e.db.DB, databasetest.StmtQuery, func(tx *gorm.DB) {
		if armed.Load() && tx.Statement.Table == "posts" && tx.Error == nil {
			fn()
		}
	})
}

// failOutboxInserts makes every insert into the outbox fail while fail is
// set, after the post was written in the same transaction.
func (e *serviceBundle) failOutboxInserts(t *testing.T, fail *atomic.Bool) error {
	t.Helper()
	forced := errors.New("forced outbox failure")
	databasetest.Fail(t, e.db.DB, databasetest.StmtCreate, forced, func(tx *gorm.DB) bool {
		return fail.Load() && tx.Statement.Table == "outbox"
	})
	return forced
}

func TestNewServiceConfig(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	_, err := reservation.NewService(db.DB, reservation.ServiceConfig{MaxAhead: -time.Hour})
	require.ErrorContains(t, err, "invalid service config")
	_, err = reservation.NewService(nil, reservation.ServiceConfig{})
	require.ErrorContains(t, err, "invalid service config")
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(t, err)
	require.NotNil(t, svc)
}

func TestServiceCreateWritesPostAndEvent(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		at := svcStart.Add(36*time.Hour + 789*time.Nanosecond)
		p, err := e.svc.Create(context.Background(), reservation.CreateInput{Title: "héllo", Content: "world", ScheduledAt: at})
		require.NoError(t, err)
		require.Positive(t, p.ID)
		require.Equal(t, reservation.StatusReserved, p.Status)
		require.Equal(t, int64(1), p.Version.Int64)
		require.Equal(t, database.Normalize(at), p.ScheduledAt)
		require.Equal(t, database.Normalize(svcStart), p.CreatedAt)
		require.Equal(t, database.Normalize(svcStart), p.UpdatedAt)
		require.Nil(t, p.PublishedAt)

		stored := e.load(t, p.ID)
		require.Equal(t, "héllo", stored.Title)
		require.Equal(t, "world", stored.Content)
		require.Equal(t, reservation.StatusReserved, stored.Status)
		require.Equal(t, int64(1), stored.Version.Int64)
		require.True(t, stored.ScheduledAt.Equal(p.ScheduledAt))
		require.True(t, stored.CreatedAt.Equal(p.CreatedAt))

		got, err := e.svc.Get(context.Background(), p.ID)
		require.NoError(t, err)
		require.Equal(t, p.Title, got.Title)

		events := e.events(t, p.ID)
		require.Len(t, events, 1)
		requireEvent(t, events[0], p, event.ActionCreated, svcStart)
	})
}

func TestServiceCreateRejectsInvalidInput(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ok := reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: svcStart.Add(time.Hour)}
		cases := []struct {
			name  string
			edit  func(in *reservation.CreateInput)
			field string
		}{
			{"empty title", func(in *reservation.CreateInput) { in.Title = "" }, "title"},
			{"blank title", func(in *reservation.CreateInput) { in.Title = "  \t" }, "title"},
			{"title of 201 characters", func(in *reservation.CreateInput) { in.Title = strings.Repeat("é", 201) }, "title"},
			{"title not UTF-8", func(in *reservation.CreateInput) { in.Title = "\xff" }, "title"},
			{"empty content", func(in *reservation.CreateInput) { in.Content = "" }, "content"},
			{"content of 20001 characters", func(in *reservation.CreateInput) { in.Content = strings.Repeat("x", 20001) }, "content"},
			{"no scheduledAt", func(in *reservation.CreateInput) { in.ScheduledAt = time.Time{} }, "scheduledAt"},
			{"scheduledAt now", func(in *reservation.CreateInput) { in.ScheduledAt = svcStart }, "scheduledAt"},
			{"scheduledAt in the past", func(in *reservation.CreateInput) { in.ScheduledAt = svcStart.Add(-time.Minute) }, "scheduledAt"},
			{"scheduledAt over a year ahead", func(in *reservation.CreateInput) { in.ScheduledAt = svcStart.Add(365*24*time.Hour + time.Second) }, "scheduledAt"},
		}
		for _, tc := range cases {
			in := ok
			tc.edit(&in)
			_, err := e.svc.Create(context.Background(), in)
			requireInvalid(t, err, tc.field)
			require.Contains(t, err.Error(), tc.field, tc.name)
		}
		posts, rows := e.counts(t)
		require.Zero(t, posts)
		require.Zero(t, rows)

		// The limits themselves are allowed.
		in := ok
		in.Title = strings.Repeat("é", 200)
		in.Content = strings.Repeat("ü", 20000)
		in.ScheduledAt = svcStart.Add(365 * 24 * time.Hour)
		p, err := e.svc.Create(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, in.Content, e.load(t, p.ID).Content)
	})
}

// TestServiceRefusesControlCharacters: a title holds no control character
// (C0, DEL, C1); content holds tab, line feed and carriage return but no
// other. Nothing is written for a refused input.
func TestServiceRefusesControlCharacters(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		kept := e.create(t, "kept")
		postsBefore, rowsBefore := e.counts(t)
		at := svcStart.Add(time.Hour)
		for _, tc := range []struct {
			title, content, field string
		}{
			{"a\nb", "c", "title"},
			{"a\tb", "c", "title"},
			{"a\rb", "c", "title"},
			{"\x00", "c", "title"},
			{"a\x1b[0m", "c", "title"},
			{"a\x7f", "c", "title"},
			{"a\u0080", "c", "title"},
			{"a\u009f", "c", "title"},
			{"t", "a\x00", "content"},
			{"t", "a\x0cb", "content"},
			{"t", "a\x1b", "content"},
			{"t", "a\x7f", "content"},
			{"t", "a\u0085", "content"},
		} {
			_, err := e.svc.Create(ctx, reservation.CreateInput{Title: tc.title, Content: tc.content, ScheduledAt: at})
			requireInvalid(t, err, tc.field)
			require.ErrorContains(t, err, "control characters", "%q %q", tc.title, tc.content)
			in := reservation.UpdateInput{Title: &tc.title}
			if tc.field == "content" {
				in = reservation.UpdateInput{Content: &tc.content}
			}
			_, err = e.svc.Update(ctx, kept.ID, in)
			requireInvalid(t, err, tc.field)
		}
		postsAfter, rowsAfter := e.counts(t)
		require.Equal(t, postsBefore, postsAfter)
		require.Equal(t, rowsBefore, rowsAfter)
		require.Equal(t, kept.Version.Int64, e.load(t, kept.ID).Version.Int64)

		p, err := e.svc.Create(ctx, reservation.CreateInput{Title: "Tabs → ok", Content: "a\tb\r\nc\n", ScheduledAt: at})
		require.NoError(t, err)
		require.Equal(t, "a\tb\r\nc\n", e.load(t, p.ID).Content)
	})
}

func TestServiceGetNotFound(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		_, err := e.svc.Get(context.Background(), 12345)
		require.ErrorIs(t, err, reservation.ErrNotFound)
		_, err = e.svc.Update(context.Background(), 12345, reservation.UpdateInput{Title: new("x")})
		require.ErrorIs(t, err, reservation.ErrNotFound)
		_, err = e.svc.Cancel(context.Background(), 12345)
		require.ErrorIs(t, err, reservation.ErrNotFound)
	})
}

func TestServiceUpdate(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		p := e.create(t, "first")

		e.clock.Set(svcStart.Add(time.Minute))
		at := svcStart.Add(48 * time.Hour)
		got, err := e.svc.Update(ctx, p.ID, reservation.UpdateInput{Title: new("second"), ScheduledAt: &at})
		require.NoError(t, err)
		require.Equal(t, "second", got.Title)
		require.Equal(t, p.Content, got.Content)
		require.Equal(t, database.Normalize(at), got.ScheduledAt)
		require.Equal(t, int64(2), got.Version.Int64)
		require.Equal(t, database.Normalize(svcStart.Add(time.Minute)), got.UpdatedAt)
		require.Equal(t, p.CreatedAt, got.CreatedAt)

		stored := e.load(t, p.ID)
		require.Equal(t, "second", stored.Title)
		require.Equal(t, p.Content, stored.Content)
		require.Equal(t, int64(2), stored.Version.Int64)
		require.True(t, stored.ScheduledAt.Equal(got.ScheduledAt))
		require.True(t, stored.UpdatedAt.Equal(got.UpdatedAt))
		require.True(t, stored.CreatedAt.Equal(p.CreatedAt))

		events := e.events(t, p.ID)
		require.Len(t, events, 2)
		requireEvent(t, events[1], got, event.ActionUpdated, svcStart.Add(time.Minute))

		// Once the stored time has passed, it may still be sent back
		// unchanged with another change, but not moved into the past.
		e.clock.Set(svcStart.Add(49 * time.Hour))
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{Content: new("new content"), ScheduledAt: &at})
		require.NoError(t, err)
		past := at.Add(time.Second)
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{ScheduledAt: &past})
		requireInvalid(t, err, "scheduledAt")
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{Title: new("")})
		requireInvalid(t, err, "title")
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{Content: new(strings.Repeat("x", 20001))})
		requireInvalid(t, err, "content")
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{})
		requireInvalid(t, err, "body")

		stored = e.load(t, p.ID)
		require.Equal(t, "new content", stored.Content)
		require.Equal(t, int64(3), stored.Version.Int64)
		require.Len(t, e.events(t, p.ID), 3)
	})
}

func TestServiceUpdateOnlyWhileReserved(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		for _, st := range []reservation.Status{reservation.StatusWorking, reservation.StatusPublished, reservation.StatusCancelled} {
			p := e.create(t, string(st))
			e.setStatus(t, p.ID, st)
			_, err := e.svc.Update(context.Background(), p.ID, reservation.UpdateInput{Title: new("changed")})
			require.ErrorIs(t, err, reservation.ErrInvalidTransition, st)
			stored := e.load(t, p.ID)
			require.Equal(t, string(st), stored.Title)
			require.Equal(t, int64(1), stored.Version.Int64)
			require.Len(t, e.events(t, p.ID), 1)
		}
	})
}

func TestServiceCancel(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()

		reserved := e.create(t, "reserved")
		working := e.create(t, "working")
		e.setStatus(t, working.ID, reservation.StatusWorking)
		e.clock.Set(svcStart.Add(time.Hour))
		for _, p := range []*reservation.Post{reserved, working} {
			got, err := e.svc.Cancel(ctx, p.ID)
			require.NoError(t, err)
			require.Equal(t, reservation.StatusCancelled, got.Status)
			require.Equal(t, int64(2), got.Version.Int64)
			stored := e.load(t, p.ID)
			require.Equal(t, reservation.StatusCancelled, stored.Status)
			require.Equal(t, int64(2), stored.Version.Int64)
			require.True(t, stored.UpdatedAt.Equal(database.Normalize(svcStart.Add(time.Hour))))
			events := e.events(t, p.ID)
			require.Len(t, events, 2)
			requireEvent(t, events[1], got, event.ActionCancelled, svcStart.Add(time.Hour))
		}

		_, err := e.svc.Cancel(ctx, reserved.ID)
		require.ErrorIs(t, err, reservation.ErrInvalidTransition)
		published := e.create(t, "published")
		e.setStatus(t, published.ID, reservation.StatusPublished)
		_, err = e.svc.Cancel(ctx, published.ID)
		require.ErrorIs(t, err, reservation.ErrInvalidTransition)
		require.Equal(t, reservation.StatusPublished, e.load(t, published.ID).Status)
		require.Len(t, e.events(t, published.ID), 1)
		require.Len(t, e.events(t, reserved.ID), 2)
	})
}

// TestServiceRollsBackWithOutbox forces the outbox insert to fail after the
// post was written: the post change must be rolled back with it.
func TestServiceRollsBackWithOutbox(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		p := e.create(t, "kept")
		var fail atomic.Bool
		forced := e.failOutboxInserts(t, &fail)
		fail.Store(true)

		_, err := e.svc.Create(ctx, reservation.CreateInput{Title: "lost", Content: "c", ScheduledAt: svcStart.Add(time.Hour)})
		require.ErrorIs(t, err, forced)
		_, err = e.svc.Update(ctx, p.ID, reservation.UpdateInput{Title: new("lost")})
		require.ErrorIs(t, err, forced)
		_, err = e.svc.Cancel(ctx, p.ID)
		require.ErrorIs(t, err, forced)

		posts, rows := e.counts(t)
		require.Equal(t, int64(1), posts)
		require.Equal(t, int64(1), rows)
		stored := e.load(t, p.ID)
		require.Equal(t, "kept", stored.Title)
		require.Equal(t, reservation.StatusReserved, stored.Status)
		require.Equal(t, int64(1), stored.Version.Int64)

		// The same with a real database error: the outbox table is gone.
		fail.Store(false)
		require.NoError(t, e.db.Exec("ALTER TABLE outbox RENAME TO outbox_hidden").Error)
		_, err = e.svc.Create(ctx, reservation.CreateInput{Title: "lost", Content: "c", ScheduledAt: svcStart.Add(time.Hour)})
		require.Error(t, err)
		_, err = e.svc.Cancel(ctx, p.ID)
		require.Error(t, err)
		require.NoError(t, e.db.Exec("ALTER TABLE outbox_hidden RENAME TO outbox").Error)
		posts, rows = e.counts(t)
		require.Equal(t, int64(1), posts)
		require.Equal(t, int64(1), rows)
		require.Equal(t, reservation.StatusReserved, e.load(t, p.ID).Status)

		// And the service still works afterwards.
		_, err = e.svc.Cancel(ctx, p.ID)
		require.NoError(t, err)
		require.Len(t, e.events(t, p.ID), 2)
	})
}

func TestServiceListKeyset(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		var all, reserved []int64
		for i := range 7 {
			p := e.create(t, fmt.Sprintf("post %d", i))
			all = append(all, p.ID)
			if i%3 == 1 {
				_, err := e.svc.Cancel(ctx, p.ID)
				require.NoError(t, err)
			} else {
				reserved = append(reserved, p.ID)
			}
		}
		ids, pages := e.walk(t, reservation.ListQuery{Limit: 3})
		require.Equal(t, all, ids)
		require.Equal(t, 3, pages)
		// Five reserved posts in pages of five: the first page knows it is the last.
		ids, pages = e.walk(t, reservation.ListQuery{Status: reservation.StatusReserved, Limit: 5})
		require.Equal(t, reserved, ids)
		require.Equal(t, 1, pages)
		ids, pages = e.walk(t, reservation.ListQuery{Status: reservation.StatusReserved, Limit: 2})
		require.Equal(t, reserved, ids)
		require.Equal(t, 3, pages)
		ids, _ = e.walk(t, reservation.ListQuery{Status: reservation.StatusCancelled, Limit: 1})
		require.Equal(t, []int64{all[1], all[4]}, ids)

		page, err := e.svc.List(ctx, reservation.ListQuery{})
		require.NoError(t, err)
		require.Len(t, page.Items, 7)
		require.Empty(t, page.NextCursor)
		page, err = e.svc.List(ctx, reservation.ListQuery{Status: reservation.StatusPublished})
		require.NoError(t, err)
		require.NotNil(t, page.Items)
		require.Empty(t, page.Items)

		for _, tc := range []struct {
			q     reservation.ListQuery
			field string
		}{
			{reservation.ListQuery{Cursor: "not a cursor!"}, "cursor"},
			{reservation.ListQuery{Cursor: "YWJj"}, "cursor"}, // base64url of "abc"
			{reservation.ListQuery{Cursor: "LTE"}, "cursor"},  // base64url of "-1"
			{reservation.ListQuery{Limit: 101}, "limit"},
			{reservation.ListQuery{Limit: -1}, "limit"},
			{reservation.ListQuery{Status: "DONE"}, "status"},
		} {
			_, err := e.svc.List(ctx, tc.q)
			requireInvalid(t, err, tc.field)
		}
	})
}

// TestServiceListByScheduledAt: pages in (scheduledAt, id) order within a
// [ScheduledFrom, ScheduledTo) range; a cursor belongs to its order.
func TestServiceListByScheduledAt(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		day := 24 * time.Hour
		// Scheduled in days from svcStart; equal days tie on id.
		offsets := []time.Duration{3 * day, day, 2 * day, day, 4 * day, 2 * day}
		var ids []int64
		for i, off := range offsets {
			p, err := e.svc.Create(ctx, reservation.CreateInput{
				Title: fmt.Sprintf("post %d", i), Content: "c", ScheduledAt: svcStart.Add(off),
			})
			require.NoError(t, err)
			ids = append(ids, p.ID)
		}
		walk := func(q reservation.ListQuery) []int64 {
			ids, _ := e.walk(t, q)
			return ids
		}
		byTime := reservation.ListQuery{Order: reservation.OrderByScheduledAt, Limit: 1}
		require.Equal(t, []int64{ids[1], ids[3], ids[2], ids[5], ids[0], ids[4]}, walk(byTime))
		byTime.Limit = 4
		require.Equal(t, []int64{ids[1], ids[3], ids[2], ids[5], ids[0], ids[4]}, walk(byTime))
		ranged := reservation.ListQuery{
			Order: reservation.OrderByScheduledAt, Limit: 1,
			ScheduledFrom: svcStart.Add(2 * day), ScheduledTo: svcStart.Add(4 * day),
		}
		require.Equal(t, []int64{ids[2], ids[5], ids[0]}, walk(ranged))
		ranged.Order = ""
		require.Equal(t, []int64{ids[0], ids[2], ids[5]}, walk(ranged))

		idPage, err := e.svc.List(ctx, reservation.ListQuery{Limit: 1})
		require.NoError(t, err)
		timePage, err := e.svc.List(ctx, reservation.ListQuery{Limit: 1, Order: reservation.OrderByScheduledAt})
		require.NoError(t, err)
		for _, tc := range []struct {
			q     reservation.ListQuery
			field string
		}{
			{reservation.ListQuery{Order: "title"}, "order"},
			{reservation.ListQuery{ScheduledFrom: svcStart, ScheduledTo: svcStart}, "scheduledTo"},
			{reservation.ListQuery{ScheduledFrom: svcStart, ScheduledTo: svcStart.Add(-time.Microsecond)}, "scheduledTo"},
			{reservation.ListQuery{Order: reservation.OrderByScheduledAt, Cursor: idPage.NextCursor}, "cursor"},
			{reservation.ListQuery{Cursor: timePage.NextCursor}, "cursor"},
		} {
			_, err := e.svc.List(ctx, tc.q)
			requireInvalid(t, err, tc.field)
		}
	})
}

// TestServiceOptimisticLockSQL pins what the service relies on from the
// optimisticlock plugin, on both dialects: an update through the model
// carries "AND version = <loaded>" and sets version = version + 1.
func TestServiceOptimisticLockSQL(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		p := reservation.Post{ID: 7, Status: reservation.StatusReserved, Version: optimisticlock.Version{Int64: 3, Valid: true}}
		stmt := db.Session(&gorm.Session{DryRun: true}).Model(&p).
			Where("status = ?", p.Status).Updates(map[string]any{"title": "x"}).Statement
		// PostgreSQL numbers its placeholders ($1); the others write "?".
		sql := regexp.MustCompile(`\$\d+`).ReplaceAllString(strings.NewReplacer("`", "", `"`, "").Replace(stmt.SQL.String()), "?")
		set, where, found := strings.Cut(sql, " WHERE ")
		require.True(t, found, sql)
		require.Contains(t, set, "version=version+1")
		require.Contains(t, where, "posts.version = ?")
		require.Contains(t, where, "id = ?")
		require.Contains(t, where, "status = ?")
		require.Contains(t, stmt.Vars, int64(3))
	})
}

// TestServiceConcurrentUpdatesFromSameVersion lets two updates read the same
// version before either writes: exactly one may win.
func TestServiceConcurrentUpdatesFromSameVersion(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		p := e.create(t, "original")

		var armed atomic.Bool
		var reads sync.WaitGroup
		reads.Add(2)
		bothRead := make(chan struct{})
		go func() { reads.Wait(); close(bothRead) }()
		// The first two reads are the updates' own, before they write;
		// later ones (a group's lock of the rows it changes) pass.
		var seen atomic.Int32
		e.onPostRead(t, &armed, func() {
			if seen.Add(1) > 2 {
				return
			}
			reads.Done()
			select {
			case <-bothRead:
			case <-time.After(10 * time.Second):
			}
		})
		armed.Store(true)

		titles := []string{"from A", "from B"}
		errs := make([]error, len(titles))
		var wg sync.WaitGroup
		for i, title := range titles {
			wg.Go(func() {
				_, errs[i] = e.svc.Update(context.Background(), p.ID, reservation.UpdateInput{Title: &title})
			})
		}
		wg.Wait()
		armed.Store(false)
		select {
		case <-bothRead:
		default:
			t.Fatal("the two updates did not read concurrently")
		}

		var winner string
		conflicts := 0
		for i, err := range errs {
			switch {
			case err == nil:
				winner = titles[i]
			case errors.Is(err, reservation.ErrConflict):
				conflicts++
			default:
				t.Fatalf("update %d: %v", i, err)
			}
		}
		require.Equal(t, 1, conflicts, "errors: %v", errs)
		stored := e.load(t, p.ID)
		require.Equal(t, winner, stored.Title)
		require.Equal(t, int64(2), stored.Version.Int64)
		events := e.events(t, p.ID)
		require.Len(t, events, 2)
		require.Contains(t, events[1].Payload, `"UPDATED"`)
	})
}

// TestServiceUpdateSeesStatusChangeWithoutVersion: a writer that changes the
// status without bumping the version between the read and the write must not
// let an edit of a no longer RESERVED post through.
func TestServiceUpdateSeesStatusChangeWithoutVersion(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		p := e.create(t, "original")
		var armed atomic.Bool
		e.onPostRead(t, &armed, func() {
			armed.Store(false)
			e.setStatus(t, p.ID, reservation.StatusWorking)
		})
		armed.Store(true)
		_, err := e.svc.Update(context.Background(), p.ID, reservation.UpdateInput{Title: new("late edit")})
		require.ErrorIs(t, err, reservation.ErrConflict)
		stored := e.load(t, p.ID)
		require.Equal(t, "original", stored.Title)
		require.Equal(t, reservation.StatusWorking, stored.Status)
		require.Len(t, e.events(t, p.ID), 1)
	})
}

// TestServiceManyConcurrentUpdates: however the edits interleave, each
// success bumps the version once and leaves exactly one UPDATED event, and
// every failure is a conflict.
func TestServiceManyConcurrentUpdates(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		p := e.create(t, "original")
		const n = 12
		start := make(chan struct{})
		var wg sync.WaitGroup
		var successes, conflicts atomic.Int64
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				title := fmt.Sprintf("edit %d", i)
				_, err := e.svc.Update(context.Background(), p.ID, reservation.UpdateInput{Title: &title})
				switch {
				case err == nil:
					successes.Add(1)
				case errors.Is(err, reservation.ErrConflict):
					conflicts.Add(1)
				default:
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("unexpected error: %v", err)
		}
		require.Equal(t, int64(n), successes.Load()+conflicts.Load())
		require.Positive(t, successes.Load())
		stored := e.load(t, p.ID)
		require.Equal(t, 1+successes.Load(), stored.Version.Int64)
		// The payload is compared decoded: a JSON column may store it
		// reformatted (PostgreSQL's JSONB, MySQL's JSON).
		var payloads []string
		require.NoError(t, e.db.Model(&outbox.Message{}).Where("aggregate_id = ?", p.ID).Pluck("payload", &payloads).Error)
		var updated int64
		for _, raw := range payloads {
			var v struct{ Action string }
			require.NoError(t, json.Unmarshal([]byte(raw), &v))
			if v.Action == "UPDATED" {
				updated++
			}
		}
		require.Equal(t, successes.Load(), updated)
		t.Logf("%d successes, %d conflicts", successes.Load(), conflicts.Load())
	})
}

// TestCreateWritesTheRowGORMWrites: the hand-built INSERT of Create writes,
// column by column, the row tx.Create writes for the same post, for a title
// with quotes, a backslash, a placeholder mark, SQL comment marks and
// characters outside the BMP, and with the nullable fields left nil (NULL,
// not a zero value) and OwnerID "" (an empty string, not NULL). A column
// the INSERT skipped or wrote differently, now or after a field is added to
// Post, makes the rows differ.
func TestCreateWritesTheRowGORMWrites(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		title := `it's "q" \ ? $1 -- /* */ ; é 😀 𝄞`
		at := svcStart.Add(time.Hour)
		got, err := e.svc.Create(ctx, reservation.CreateInput{Title: title, Content: "c\\n\x00?", ScheduledAt: at})
		if err != nil { // a NUL is refused by the rules: the content without it
			got, err = e.svc.Create(ctx, reservation.CreateInput{Title: title, Content: `c\n?`, ScheduledAt: at})
		}
		require.NoError(t, err)
		byGORM := reservation.Post{Title: got.Title, Content: got.Content, Status: got.Status, ScheduledAt: got.ScheduledAt,
			CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt, OwnerID: got.OwnerID, Traceparent: got.Traceparent,
			Version: optimisticlock.Version{Int64: 1, Valid: true}}
		require.NoError(t, e.db.Create(&byGORM).Error)

		row := func(id int64) map[string]any {
			m := map[string]any{}
			require.NoError(t, e.db.Table("posts").Where("id = ?", id).Take(&m).Error)
			delete(m, "id")
			return m
		}
		mine, theirs := row(got.ID), row(byGORM.ID)
		require.Equal(t, theirs, mine)
		require.Equal(t, title, mine["title"])
		require.Nil(t, mine["published_at"], "no publication time is NULL")
		require.NotNil(t, mine["owner_id"], `no owner is "", not NULL`)
	})
}

// A message's sequence is its outbox row id (event.CloudEventsSequence), so
// a post's row ids must follow the order its changes committed in, however
// many writers race: the change that committed last (the post's final
// state) has the highest id of the post's events. Writers serialize on the
// post's row, which they update before they append the event.
func TestOutboxIDFollowsThePostsCommitOrder(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		post := e.create(t, "raced")
		const writers, each = 4, 5
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					at := svcStart.Add(48*time.Hour + time.Duration(w*each+i+1)*time.Minute)
					for {
						_, err := e.svc.Update(ctx, post.ID, reservation.UpdateInput{ScheduledAt: &at})
						if err != nil && errors.Is(err, reservation.ErrConflict) {
							continue // another writer came first: try again
						}
						if err != nil {
							errs <- err
							return
						}
						break
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		var rows []outbox.Message
		require.NoError(t, e.db.DB.Where("aggregate_id = ?", post.ID).Order("id").Find(&rows).Error)
		require.Len(t, rows, 1+writers*each, "CREATED and every update")
		var f event.PostingEventFields
		require.NoError(t, json.Unmarshal([]byte(rows[0].Payload), &f))
		require.Equal(t, event.ActionCreated, f.Action, "the first event has the lowest id")
		require.NoError(t, json.Unmarshal([]byte(rows[len(rows)-1].Payload), &f))
		final := e.load(t, post.ID)
		require.True(t, final.ScheduledAt.Equal(f.ScheduledAt), "the last committed change (%s) is not the highest id (%s)",
			final.ScheduledAt, f.ScheduledAt)
	})
}

// A Scope in the context makes the caller the owner of what it creates and
// hides every other owner's post (ErrNotFound, nothing written); All sees
// every post; no Scope is the service itself. Each event carries the
// post's owner.
func TestScopeOwnsAndHides(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		bg := context.Background()
		alice := reservation.WithScope(bg, reservation.Scope{OwnerID: "alice"})
		bob := reservation.WithScope(bg, reservation.Scope{OwnerID: "bob"})
		admin := reservation.WithScope(bg, reservation.Scope{OwnerID: "root", All: true})
		in := reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: svcStart.Add(time.Hour)}
		a, err := e.svc.Create(alice, in)
		require.NoError(t, err)
		require.Equal(t, "alice", a.OwnerID)
		b, err := e.svc.Create(bob, in)
		require.NoError(t, err)
		anon, err := e.svc.Create(bg, in)
		require.NoError(t, err)
		require.Equal(t, "", anon.OwnerID)
		require.Equal(t, "bob", e.load(t, b.ID).OwnerID)

		_, err = e.svc.Get(alice, b.ID)
		require.ErrorIs(t, err, reservation.ErrNotFound)
		title := "x"
		_, err = e.svc.Update(alice, b.ID, reservation.UpdateInput{Title: &title})
		require.ErrorIs(t, err, reservation.ErrNotFound)
		_, err = e.svc.Cancel(alice, b.ID)
		require.ErrorIs(t, err, reservation.ErrNotFound)
		require.Equal(t, reservation.StatusReserved, e.load(t, b.ID).Status)
		require.EqualValues(t, 1, e.load(t, b.ID).Version.Int64)

		ids := func(ctx context.Context, q reservation.ListQuery) []int64 {
			page, err := e.svc.List(ctx, q)
			require.NoError(t, err)
			out := []int64{}
			for _, p := range page.Items {
				out = append(out, p.ID)
			}
			return out
		}
		require.Equal(t, []int64{a.ID}, ids(alice, reservation.ListQuery{}))
		require.Equal(t, []int64{a.ID, b.ID, anon.ID}, ids(admin, reservation.ListQuery{}))
		require.Equal(t, []int64{a.ID, b.ID, anon.ID}, ids(bg, reservation.ListQuery{}))
		bobID, none := "bob", ""
		require.Equal(t, []int64{b.ID}, ids(admin, reservation.ListQuery{OwnerID: &bobID}))
		require.Equal(t, []int64{anon.ID}, ids(admin, reservation.ListQuery{OwnerID: &none}))
		require.Empty(t, ids(alice, reservation.ListQuery{OwnerID: &bobID}), "a filter never widens the scope")

		_, err = e.svc.Cancel(admin, b.ID)
		require.NoError(t, err)
		var rows []outbox.Message
		require.NoError(t, e.db.Where("aggregate_id = ?", b.ID).Order("id").Find(&rows).Error)
		require.Len(t, rows, 2)
		for _, m := range rows {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(m.Payload), &v))
			require.Equal(t, "bob", v["ownerId"], "the owner, also for an admin's change")
		}
	})
}
