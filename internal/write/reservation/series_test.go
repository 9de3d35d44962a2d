package reservation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// seriesBundle is a service whose series clock the test moves by hand.
type seriesBundle struct {
	db    *database.DB
	svc   *reservation.Service
	clock *clocktest.Clock
}

func newSeriesService(t *testing.T, db *gorm.DB, clock *clocktest.Clock, mod func(*reservation.ServiceConfig)) *reservation.Service {
	t.Helper()
	cfg := reservation.ServiceConfig{Now: clock.Now,
		SeriesClock: func(context.Context, *gorm.DB) (time.Time, error) { return clock.Now(), nil }}
	if mod != nil {
		mod(&cfg)
	}
	svc, err := reservation.NewService(db, cfg)
	require.NoError(t, err)
	return svc
}

// eachSeries runs fn on every database with the clock at start.
func eachSeries(t *testing.T, start time.Time, fn func(t *testing.T, e *seriesBundle)) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		clock := clocktest.New(start)
		fn(t, &seriesBundle{db: db, svc: newSeriesService(t, db.DB, clock, nil), clock: clock})
	})
}

// posts returns the posts of series id in occurrence order.
func (e *seriesBundle) posts(t *testing.T, id int64) []reservation.Post {
	t.Helper()
	var posts []reservation.Post
	require.NoError(t, e.db.Where("series_id = ?", id).Order("occurrence, id").Find(&posts).Error)
	return posts
}

// events returns the POSTING_EVENT values of post id, decoded, in order.
func (e *seriesBundle) events(t *testing.T, postID int64) []map[string]any {
	t.Helper()
	var rows []outbox.Message
	require.NoError(t, e.db.Where("aggregate_id = ? AND event_type = ?", postID, "POSTING_EVENT").Order("id").Find(&rows).Error)
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		require.NoError(t, json.Unmarshal([]byte(r.Payload), &out[i]))
	}
	return out
}

// materializeUntil moves the clock a day at a time to end, materializing
// at each step, as the serve loop does.
func (e *seriesBundle) materializeUntil(t *testing.T, end time.Time) {
	t.Helper()
	for e.clock.Now().Before(end) {
		e.clock.Add(24 * time.Hour)
		_, err := e.svc.MaterializeSeries(context.Background(), 100)
		require.NoError(t, err)
	}
}

func local(s string) time.Time {
	t, err := reservation.ParseLocalTime(s)
	if err != nil {
		panic(err)
	}
	return t
}

func instant(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

type occurrencePost struct {
	occurrence, scheduledAt string
}

func occurrencePosts(posts []reservation.Post) []occurrencePost {
	out := make([]occurrencePost, len(posts))
	for i, p := range posts {
		out[i] = occurrencePost{reservation.FormatLocalTime(*p.Occurrence), p.ScheduledAt.UTC().Format(time.RFC3339)}
	}
	return out
}

// A weekly series at a local time that the spring change skips (Berlin)
// and one that the autumn change repeats (New York) becomes one post per
// week, at the instant RFC 5545 names: the offset before a gap, the first
// of a repeated hour. Each post's CREATED event carries the series.
func TestWeeklySeriesAcrossDSTIsOnePostPerWeekAtTheZonesInstants(t *testing.T) {
	eachSeries(t, instant("2027-03-10T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		berlin, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "Wochenpost", Content: "c",
			TimeZone: "Europe/Berlin", Start: local("2027-03-14T02:30:00"), RRule: "FREQ=WEEKLY;BYDAY=SU"})
		require.NoError(t, err)
		require.Equal(t, reservation.SeriesActive, berlin.Status)
		require.Equal(t, []reservation.Occurrence{
			{Local: local("2027-03-14T02:30:00"), At: instant("2027-03-14T01:30:00Z")},
			{Local: local("2027-03-21T02:30:00"), At: instant("2027-03-21T01:30:00Z")},
			{Local: local("2027-03-28T02:30:00"), At: instant("2027-03-28T01:30:00Z")}, // skipped hour: 03:30 CEST
			{Local: local("2027-04-04T02:30:00"), At: instant("2027-04-04T00:30:00Z")},
			{Local: local("2027-04-11T02:30:00"), At: instant("2027-04-11T00:30:00Z")},
		}, berlin.Next)
		// Created with the series: the horizon (7 days and an eighth) holds one.
		require.Len(t, e.posts(t, berlin.ID), 1)

		e.clock.Set(instant("2027-10-20T00:00:00Z"))
		ny, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "Weekly", Content: "c",
			TimeZone: "America/New_York", Start: local("2027-10-24T01:30:00"), RRule: "FREQ=WEEKLY;COUNT=3"})
		require.NoError(t, err)
		e.clock.Set(instant("2027-03-10T00:00:00Z"))
		e.materializeUntil(t, instant("2027-04-06T00:00:00Z"))
		require.Equal(t, []occurrencePost{
			{"2027-03-14T02:30:00", "2027-03-14T01:30:00Z"},
			{"2027-03-21T02:30:00", "2027-03-21T01:30:00Z"},
			{"2027-03-28T02:30:00", "2027-03-28T01:30:00Z"},
			{"2027-04-04T02:30:00", "2027-04-04T00:30:00Z"},
			{"2027-04-11T02:30:00", "2027-04-11T00:30:00Z"},
		}, occurrencePosts(e.posts(t, berlin.ID)))

		e.clock.Set(instant("2027-10-20T00:00:00Z"))
		e.materializeUntil(t, instant("2027-11-10T00:00:00Z"))
		require.Equal(t, []occurrencePost{
			{"2027-10-24T01:30:00", "2027-10-24T05:30:00Z"}, // EDT
			{"2027-10-31T01:30:00", "2027-10-31T05:30:00Z"}, // EDT
			{"2027-11-07T01:30:00", "2027-11-07T05:30:00Z"}, // twice that night: the first, EDT
		}, occurrencePosts(e.posts(t, ny.ID)))
		got, err := e.svc.GetSeries(ctx, ny.ID)
		require.NoError(t, err)
		require.Equal(t, reservation.SeriesEnded, got.Status, "COUNT=3 reached")
		require.Empty(t, got.Next)

		p := e.posts(t, berlin.ID)[2]
		require.Equal(t, "Wochenpost", p.Title)
		require.Equal(t, reservation.StatusReserved, p.Status)
		evs := e.events(t, p.ID)
		require.Len(t, evs, 1)
		require.Equal(t, "CREATED", evs[0]["action"])
		require.EqualValues(t, berlin.ID, evs[0]["seriesId"])
		require.Equal(t, "2027-03-28T02:30:00", evs[0]["occurrence"])
		require.Equal(t, "2027-03-28T01:30:00Z", evs[0]["scheduledAt"])

		require.Equal(t, berlin.ID, *p.SeriesID)
		require.Equal(t, "2027-03-28T02:30:00", reservation.FormatLocalTime(*p.Occurrence))
		require.False(t, p.SeriesException)
	})
}

// Tokyo has no DST: a daily series keeps its UTC time all year, and the
// posts list of a series (seriesId) holds its occurrences only.
func TestDailySeriesInAZoneWithoutDSTAndThePostsOfASeries(t *testing.T) {
	eachSeries(t, instant("2027-03-25T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		_, err := e.svc.Create(ctx, reservation.CreateInput{Title: "plain", Content: "c", ScheduledAt: instant("2027-03-26T00:00:00Z")})
		require.NoError(t, err)
		s, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "t", Content: "c", TimeZone: "Asia/Tokyo",
			Start: local("2027-03-26T02:30:00"), RRule: "FREQ=DAILY;UNTIL=20270401T000000"})
		require.NoError(t, err)
		posts := e.posts(t, s.ID)
		require.Len(t, posts, 6, "26th to 31st")
		for _, p := range posts {
			require.Equal(t, 17, p.ScheduledAt.UTC().Hour())
			require.Equal(t, 30, p.ScheduledAt.UTC().Minute())
		}
		page, err := e.svc.List(ctx, reservation.ListQuery{SeriesID: &s.ID, Limit: 4})
		require.NoError(t, err)
		require.Len(t, page.Items, 4)
		require.NotEmpty(t, page.NextCursor)
		page, err = e.svc.List(ctx, reservation.ListQuery{SeriesID: &s.ID, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Len(t, page.Items, 2)
		for _, p := range page.Items {
			require.Equal(t, s.ID, *p.SeriesID)
		}
	})
}

// BYMONTHDAY=31 passes over the months without a 31st; COUNT ends the
// series after its occurrences, UNTIL at its bound. A publishWithin sets
// each occurrence's publishBy.
func TestMonthlySeriesOnThe31stWithCountAndUntil(t *testing.T) {
	eachSeries(t, instant("2027-01-01T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		within := "PT2H"
		counted, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "t", Content: "c", TimeZone: "Europe/Berlin",
			Start: local("2027-01-31T09:00:00"), RRule: "FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", PublishWithin: &within})
		require.NoError(t, err)
		until, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "t", Content: "c", TimeZone: "Europe/Berlin",
			Start: local("2027-01-31T09:00:00"), RRule: "FREQ=MONTHLY;BYMONTHDAY=31;UNTIL=20270731T065959Z"})
		require.NoError(t, err)
		e.materializeUntil(t, instant("2027-12-31T00:00:00Z"))
		require.Equal(t, []occurrencePost{
			{"2027-01-31T09:00:00", "2027-01-31T08:00:00Z"},
			{"2027-03-31T09:00:00", "2027-03-31T07:00:00Z"},
			{"2027-05-31T09:00:00", "2027-05-31T07:00:00Z"},
		}, occurrencePosts(e.posts(t, counted.ID)))
		for _, p := range e.posts(t, counted.ID) {
			require.True(t, p.PublishBy.Equal(p.ScheduledAt.Add(2*time.Hour)), "publishWithin PT2H")
		}
		require.Equal(t, []occurrencePost{
			{"2027-01-31T09:00:00", "2027-01-31T08:00:00Z"},
			{"2027-03-31T09:00:00", "2027-03-31T07:00:00Z"},
			{"2027-05-31T09:00:00", "2027-05-31T07:00:00Z"},
		}, occurrencePosts(e.posts(t, until.ID)), "July 31st 09:00 CEST is 07:00 UTC, after UNTIL")
		for _, id := range []int64{counted.ID, until.ID} {
			s, err := e.svc.GetSeries(ctx, id)
			require.NoError(t, err)
			require.Equal(t, reservation.SeriesEnded, s.Status)
		}
	})
}

// Two instances materializing the same series at once, over and over, make
// each occurrence one post with one CREATED event.
func TestRacingMaterializersMakeEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			pools := databasetest.Pools(t, databasetest.URL(t, d, "series"), 2)
			clock := clocktest.New(instant("2027-05-01T00:00:00Z"))
			svcs := []*reservation.Service{newSeriesService(t, pools[0].DB, clock, nil), newSeriesService(t, pools[1].DB, clock, nil)}
			ctx := context.Background()
			var ids []int64
			for i := range 3 {
				s, err := svcs[0].CreateSeries(ctx, reservation.SeriesInput{Title: fmt.Sprint("s", i), Content: "c",
					TimeZone: "Europe/Berlin", Start: local("2027-05-01T06:00:00"), RRule: "FREQ=DAILY;BYHOUR=6,12,18"})
				require.NoError(t, err)
				ids = append(ids, s.ID)
			}
			for range 10 {
				clock.Add(3 * 24 * time.Hour)
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i, svc := range svcs {
					wg.Go(func() { _, errs[i] = svc.MaterializeSeries(ctx, 100) })
				}
				wg.Wait()
				require.NoError(t, errs[0])
				require.NoError(t, errs[1])
			}
			// 30 days plus the horizon, three a day, per series.
			for _, id := range ids {
				var rows []struct {
					Occurrence time.Time
					N          int
				}
				require.NoError(t, pools[0].Raw("SELECT occurrence, COUNT(*) AS n FROM posts WHERE series_id = ? GROUP BY occurrence", id).
					Scan(&rows).Error)
				require.Greater(t, len(rows), 3*37)
				for _, r := range rows {
					require.Equalf(t, 1, r.N, "series %d occurrence %s", id, r.Occurrence)
				}
				var events, posts int64
				require.NoError(t, pools[0].Model(&reservation.Post{}).Where("series_id = ?", id).Count(&posts).Error)
				require.NoError(t, pools[0].Model(&outbox.Message{}).
					Where("aggregate_id IN (SELECT id FROM posts WHERE series_id = ?)", id).Count(&events).Error)
				require.Equal(t, posts, events, "one CREATED event per post")
				require.EqualValues(t, len(rows), posts)
			}
		})
	}
}

// An edit applies to the RESERVED occurrences that are not exceptions: kept
// occurrences take the new content and time, dropped ones are cancelled,
// new ones are made. An occurrence changed or cancelled on its own is an
// exception that the edit and the series' cancel leave as it is, and whose
// occurrence is not made again.
func TestSeriesEditAndCancelKeepTheExceptions(t *testing.T) {
	eachSeries(t, instant("2027-06-01T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		s, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "daily", Content: "old", TimeZone: "Europe/Berlin",
			Start: local("2027-06-02T09:00:00"), RRule: "FREQ=DAILY"})
		require.NoError(t, err)
		posts := e.posts(t, s.ID)
		require.Len(t, posts, 7, "June 2nd to 8th within 7 days and an eighth (189h)")

		// Exceptions: the 3rd rescheduled, the 4th cancelled, the 5th's content edited.
		moved := posts[1].ScheduledAt.Add(30 * time.Minute)
		_, err = e.svc.Update(ctx, posts[1].ID, reservation.UpdateInput{ScheduledAt: &moved})
		require.NoError(t, err)
		_, err = e.svc.Cancel(ctx, posts[2].ID)
		require.NoError(t, err)
		mine := "my own"
		_, err = e.svc.Update(ctx, posts[3].ID, reservation.UpdateInput{Content: &mine})
		require.NoError(t, err)

		// Edit: new content, every other day at 10:00 from the 2nd.
		content, rule := "new", "FREQ=DAILY;INTERVAL=2;BYHOUR=10"
		e.clock.Set(instant("2027-06-01T12:00:00Z"))
		edited, err := e.svc.UpdateSeries(ctx, s.ID, reservation.SeriesUpdate{Content: &content, RRule: &rule})
		require.NoError(t, err)
		require.Equal(t, "new", edited.Content)
		require.Equal(t, int64(2), edited.Version)

		byOcc := map[string]reservation.Post{}
		for _, p := range e.posts(t, s.ID) {
			byOcc[reservation.FormatLocalTime(*p.Occurrence)] = p
		}
		// The exceptions, as their owner left them.
		require.True(t, byOcc["2027-06-03T09:00:00"].SeriesException)
		require.Equal(t, reservation.StatusReserved, byOcc["2027-06-03T09:00:00"].Status)
		require.True(t, byOcc["2027-06-03T09:00:00"].ScheduledAt.Equal(moved))
		require.Equal(t, "old", byOcc["2027-06-03T09:00:00"].Content)
		require.Equal(t, reservation.StatusCancelled, byOcc["2027-06-04T09:00:00"].Status)
		require.Equal(t, "my own", byOcc["2027-06-05T09:00:00"].Content)
		require.Equal(t, reservation.StatusReserved, byOcc["2027-06-05T09:00:00"].Status)
		// The others at 09:00 are dropped by the new rule: cancelled, with an event.
		for _, day := range []string{"02", "06", "07", "08"} {
			p := byOcc["2027-06-"+day+"T09:00:00"]
			require.Equal(t, reservation.StatusCancelled, p.Status, day)
			evs := e.events(t, p.ID)
			require.Equal(t, "CANCELLED", evs[len(evs)-1]["action"])
			require.EqualValues(t, s.ID, evs[len(evs)-1]["seriesId"])
		}
		// New occurrences at 10:00 every other day, from the edit on.
		for _, day := range []string{"02", "04", "06", "08"} {
			p, ok := byOcc["2027-06-"+day+"T10:00:00"]
			require.True(t, ok, day)
			require.Equal(t, "new", p.Content)
			require.Equal(t, reservation.StatusReserved, p.Status)
			require.True(t, p.ScheduledAt.Equal(local("2027-06-"+day+"T08:00:00")), "10:00 CEST")
		}

		// A content edit keeps the occurrences and moves nothing: UPDATED events.
		content = "newer"
		_, err = e.svc.UpdateSeries(ctx, s.ID, reservation.SeriesUpdate{Content: &content})
		require.NoError(t, err)
		p := e.posts(t, s.ID)
		for _, q := range p {
			if reservation.FormatLocalTime(*q.Occurrence) == "2027-06-04T10:00:00" {
				require.Equal(t, "newer", q.Content)
				evs := e.events(t, q.ID)
				require.Equal(t, []any{"CREATED", "UPDATED"}, []any{evs[0]["action"], evs[1]["action"]})
			}
		}

		// The cancel: no further occurrences; RESERVED followers cancelled,
		// exceptions kept.
		cancelled, err := e.svc.CancelSeries(ctx, s.ID)
		require.NoError(t, err)
		require.Equal(t, reservation.SeriesCancelled, cancelled.Status)
		require.Empty(t, cancelled.Next)
		var reserved []string
		for _, p := range e.posts(t, s.ID) {
			if p.Status == reservation.StatusReserved {
				reserved = append(reserved, reservation.FormatLocalTime(*p.Occurrence))
			}
		}
		require.Equal(t, []string{"2027-06-03T09:00:00", "2027-06-05T09:00:00"}, reserved, "only the exceptions")
		before := len(e.posts(t, s.ID))
		e.materializeUntil(t, instant("2027-06-20T00:00:00Z"))
		require.Len(t, e.posts(t, s.ID), before, "a cancelled series makes no more posts")
		_, err = e.svc.CancelSeries(ctx, s.ID)
		require.ErrorIs(t, err, reservation.ErrInvalidTransition)
		_, err = e.svc.UpdateSeries(ctx, s.ID, reservation.SeriesUpdate{Content: &content})
		require.ErrorIs(t, err, reservation.ErrInvalidTransition)
	})
}

// Bad input is refused naming its field, and writes nothing.
func TestSeriesInputIsRefusedNamingTheField(t *testing.T) {
	eachSeries(t, instant("2027-06-01T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		ok := reservation.SeriesInput{Title: "t", Content: "c", TimeZone: "Europe/Berlin", Start: local("2027-06-02T09:00:00"), RRule: "FREQ=DAILY"}
		bad := func(field string, mod func(in *reservation.SeriesInput)) {
			t.Helper()
			in := ok
			mod(&in)
			_, err := e.svc.CreateSeries(ctx, in)
			requireInvalid(t, err, field)
		}
		bad("timeZone", func(in *reservation.SeriesInput) { in.TimeZone = "Mars/Olympus_Mons" })
		bad("timeZone", func(in *reservation.SeriesInput) { in.TimeZone = "" })
		bad("rrule", func(in *reservation.SeriesInput) { in.RRule = "FREQ=MINUTELY" })
		bad("rrule", func(in *reservation.SeriesInput) { in.RRule = "FREQ=DAILY;BYYEARDAY=3" })
		bad("rrule", func(in *reservation.SeriesInput) {
			in.RRule = "FREQ=DAILY;COUNT=2"
			in.Start = local("2027-05-01T09:00:00")
		})
		bad("rrule", func(in *reservation.SeriesInput) {
			in.RRule = "FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23;BYMINUTE=0,10,20,30,40,50"
		})
		bad("start", func(in *reservation.SeriesInput) { in.Start = time.Time{} })
		bad("start", func(in *reservation.SeriesInput) {
			// Twice a day since 1900: 92,000 occurrences before now, which
			// every view of the series would expand again.
			in.Start = local("1900-01-01T09:00:00")
			in.RRule = "FREQ=DAILY;BYHOUR=9,21"
		})
		bad("title", func(in *reservation.SeriesInput) { in.Title = " " })
		bad("publishWithin", func(in *reservation.SeriesInput) { d := "P1M"; in.PublishWithin = &d })
		var n int64
		require.NoError(t, e.db.Model(&reservation.Series{}).Count(&n).Error)
		require.Zero(t, n)
		require.NoError(t, e.db.Model(&reservation.Post{}).Count(&n).Error)
		require.Zero(t, n)
	})
}

// Series are their owner's: another owner's is not found, the list holds
// one's own, in keyset pages, and an administrator sees all.
func TestSeriesAreScopedToTheirOwner(t *testing.T) {
	eachSeries(t, instant("2027-06-01T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		alice := reservation.WithScope(context.Background(), reservation.Scope{OwnerID: "alice"})
		bob := reservation.WithScope(context.Background(), reservation.Scope{OwnerID: "bob"})
		admin := reservation.WithScope(context.Background(), reservation.Scope{OwnerID: "root", All: true})
		in := reservation.SeriesInput{Title: "t", Content: "c", TimeZone: "UTC", Start: local("2027-06-02T09:00:00"), RRule: "FREQ=WEEKLY"}
		var mine []int64
		for range 3 {
			s, err := e.svc.CreateSeries(alice, in)
			require.NoError(t, err)
			require.Equal(t, "alice", s.OwnerID)
			mine = append(mine, s.ID)
		}
		other, err := e.svc.CreateSeries(bob, in)
		require.NoError(t, err)
		require.Equal(t, "bob", e.posts(t, other.ID)[0].OwnerID, "the occurrence posts are the series owner's")

		_, err = e.svc.GetSeries(alice, other.ID)
		require.ErrorIs(t, err, reservation.ErrSeriesNotFound)
		_, err = e.svc.CancelSeries(alice, other.ID)
		require.ErrorIs(t, err, reservation.ErrSeriesNotFound)
		page, err := e.svc.ListSeries(alice, reservation.SeriesListQuery{Limit: 2})
		require.NoError(t, err)
		require.Equal(t, mine[:2], []int64{page.Items[0].ID, page.Items[1].ID})
		page, err = e.svc.ListSeries(alice, reservation.SeriesListQuery{Limit: 2, Cursor: page.NextCursor})
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		require.Equal(t, mine[2], page.Items[0].ID)
		require.Empty(t, page.NextCursor)
		page, err = e.svc.ListSeries(admin, reservation.SeriesListQuery{})
		require.NoError(t, err)
		require.Len(t, page.Items, 4)
		require.Len(t, page.Items[0].Next, reservation.NextOccurrencesShown)
	})
}

// A zone edit keeps the local occurrences: the posts that follow the series
// move to the new zone's instants, an exception keeps its own, and its
// occurrence is not made a second time.
func TestSeriesZoneEditMovesTheFollowersAndKeepsAnException(t *testing.T) {
	eachSeries(t, instant("2027-06-01T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		s, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "daily", Content: "c", TimeZone: "Europe/Berlin",
			Start: local("2027-06-02T09:00:00"), RRule: "FREQ=DAILY;COUNT=4"})
		require.NoError(t, err)
		posts := e.posts(t, s.ID)
		require.Len(t, posts, 4)
		mine := "mine"
		_, err = e.svc.Update(ctx, posts[1].ID, reservation.UpdateInput{Content: &mine})
		require.NoError(t, err)

		zone := "America/New_York"
		_, err = e.svc.UpdateSeries(ctx, s.ID, reservation.SeriesUpdate{TimeZone: &zone})
		require.NoError(t, err)
		require.Equal(t, []occurrencePost{
			{"2027-06-02T09:00:00", "2027-06-02T13:00:00Z"}, // EDT
			{"2027-06-03T09:00:00", "2027-06-03T07:00:00Z"}, // the exception, still at Berlin's 09:00
			{"2027-06-04T09:00:00", "2027-06-04T13:00:00Z"},
			{"2027-06-05T09:00:00", "2027-06-05T13:00:00Z"},
		}, occurrencePosts(e.posts(t, s.ID)), "the same four posts, no second post of the exception's occurrence")
		for i, p := range e.posts(t, s.ID) {
			require.Equal(t, posts[i].ID, p.ID)
			require.Equal(t, reservation.StatusReserved, p.Status)
		}
		evs := e.events(t, posts[0].ID)
		require.Equal(t, "UPDATED", evs[len(evs)-1]["action"])
		require.Equal(t, "2027-06-02T13:00:00Z", evs[len(evs)-1]["scheduledAt"])
	})
}

// A series edit whose first follower the scheduler takes (WORKING) between
// the edit's read of the followers and its write of that post leaves that
// post as the scheduler has it and still applies the edit to every other
// follower: each takes the new title, with its UPDATED event.
func TestSeriesEditAppliesToTheOtherFollowersWhenOneWasJustTaken(t *testing.T) {
	eachSeries(t, instant("2027-06-01T00:00:00Z"), func(t *testing.T, e *seriesBundle) {
		ctx := context.Background()
		s, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "old", Content: "c", TimeZone: "Europe/Berlin",
			Start: local("2027-06-02T09:00:00"), RRule: "FREQ=DAILY"})
		require.NoError(t, err)
		posts := e.posts(t, s.ID)
		require.Len(t, posts, 7)
		taken := posts[0].ID

		// The scheduler's commit, as the edit's transaction sees it right
		// after it read the followers.
		var once sync.Once
		require.NoError(t, e.db.Callback().Query().After("gorm:query").Register("test:scheduler-takes-a-follower", func(tx *gorm.DB) {
			if tx.Statement.Table != (reservation.Post{}).TableName() || tx.Error != nil ||
				!strings.Contains(tx.Statement.SQL.String(), "series_exception") {
				return
			}
			once.Do(func() {
				require.NoError(t, tx.Session(&gorm.Session{NewDB: true}).Table((reservation.Post{}).TableName()).Where("id = ?", taken).
					Updates(map[string]any{"status": reservation.StatusWorking, "version": gorm.Expr("version + 1")}).Error)
			})
		}))
		title := "new"
		_, err = e.svc.UpdateSeries(ctx, s.ID, reservation.SeriesUpdate{Title: &title})
		require.NoError(t, err)

		for _, p := range e.posts(t, s.ID) {
			if p.ID == taken {
				require.Equal(t, reservation.StatusWorking, p.Status)
				require.Equal(t, "old", p.Title, "the taken post is the scheduler's")
				continue
			}
			require.Equalf(t, "new", p.Title, "post of %s", reservation.FormatLocalTime(*p.Occurrence))
			evs := e.events(t, p.ID)
			require.Equal(t, "UPDATED", evs[len(evs)-1]["action"])
		}
	})
}
