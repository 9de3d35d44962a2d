package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// tomorrowIn is tomorrow's date in zone at 09:00, as a local date-time: the
// API's series run on the database's clock, so their dates follow today's.
func tomorrowIn(t *testing.T, zone string) (string, time.Time) {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	d := time.Now().In(loc).AddDate(0, 0, 1)
	at := time.Date(d.Year(), d.Month(), d.Day(), 9, 0, 0, 0, loc)
	return at.Format(reservation.LocalTimeLayout), at.UTC()
}

func seriesBody(start, zone, rule, extra string) string {
	return fmt.Sprintf(`{"title":"Daily","content":"c","timeZone":%q,"start":%q,"rrule":%q%s}`, zone, start, rule, extra)
}

// A series is created with 201, its Location and its next occurrences, and
// its occurrences within the horizon are posts listed by seriesId, each
// carrying the series; GET, the list, PATCH and cancel answer it.
func TestSeriesLifecycleOverHTTP(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		start, first := tomorrowIn(t, "Asia/Tokyo")
		resp, body := e.do(t, http.MethodPost, "/api/v1/series", "application/json",
			seriesBody(start, "Asia/Tokyo", "FREQ=DAILY;COUNT=10", `,"publishWithin":"PT1H"`))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		var s api.SeriesJSON
		require.NoError(t, json.Unmarshal(body, &s))
		require.Equal(t, fmt.Sprintf("/api/v1/series/%d", s.ID), resp.Header.Get("Location"))
		require.Equal(t, reservation.SeriesActive, s.Status)
		require.Equal(t, start, s.Start)
		require.Equal(t, "PT1H", *s.PublishWithin)
		require.Len(t, s.NextOccurrences, reservation.NextOccurrencesShown)
		require.Equal(t, start, s.NextOccurrences[0].Occurrence)
		require.Equal(t, reservation.FormatJSONTime(first), s.NextOccurrences[0].ScheduledAt)
		require.Equal(t, reservation.FormatJSONTime(first.Add(time.Hour)), *s.NextOccurrences[0].PublishBy)

		resp, body = e.do(t, http.MethodGet, fmt.Sprintf("/api/v1/posts?seriesId=%d&limit=100", s.ID), "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var page struct{ Items []api.PostJSON }
		require.NoError(t, json.Unmarshal(body, &page))
		require.GreaterOrEqual(t, len(page.Items), 7, "a week of occurrences")
		require.Equal(t, s.ID, *page.Items[0].SeriesID)
		require.Equal(t, start, *page.Items[0].Occurrence)
		require.Equal(t, reservation.FormatJSONTime(first), page.Items[0].ScheduledAt)
		require.Equal(t, reservation.FormatJSONTime(first.Add(time.Hour)), *page.Items[0].PublishBy)
		require.False(t, *page.Items[0].SeriesException)

		resp, body = e.do(t, http.MethodGet, fmt.Sprintf("/api/v1/series/%d", s.ID), "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		resp, body = e.do(t, http.MethodGet, "/api/v1/series?limit=1", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Contains(t, string(body), `"nextCursor":""`)

		resp, body = e.do(t, http.MethodPatch, fmt.Sprintf("/api/v1/series/%d", s.ID), "application/json",
			`{"title":"Renamed","publishWithin":null}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.NoError(t, json.Unmarshal(body, &s))
		require.Equal(t, "Renamed", s.Title)
		require.Nil(t, s.PublishWithin)
		post := loadPost(t, e.db.DB, fmt.Sprint(page.Items[0].ID))
		require.Equal(t, "Renamed", post.Title)
		require.Nil(t, post.PublishBy)

		resp, body = e.do(t, http.MethodPost, fmt.Sprintf("/api/v1/series/%d/cancel", s.ID), "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.NoError(t, json.Unmarshal(body, &s))
		require.Equal(t, reservation.SeriesCancelled, s.Status)
		require.Empty(t, s.NextOccurrences)
		require.Equal(t, reservation.StatusCancelled, loadPost(t, e.db.DB, fmt.Sprint(page.Items[0].ID)).Status)

		resp, body = e.do(t, http.MethodPost, fmt.Sprintf("/api/v1/series/%d/cancel", s.ID), "", "")
		requireProblem(t, resp, body, http.StatusConflict)
		resp, body = e.do(t, http.MethodGet, "/api/v1/series/999999", "", "")
		p := requireProblem(t, resp, body, http.StatusNotFound)
		require.Equal(t, "no series has id 999999", p.Detail)
	})
}

// Bad input is a 400 naming the field, and writes nothing.
func TestSeriesBadInputIsA400NamingTheField(t *testing.T) {
	eachAPI(t, func(t *testing.T, e *apiEnv) {
		start, _ := tomorrowIn(t, "Europe/Berlin")
		check := writesNothing(t, e.db.DB)
		dense := "FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23;BYMINUTE=0,10,20,30,40,50"
		for _, c := range []struct{ body, field, detail string }{
			{seriesBody(start, "Europe/Atlantis", "FREQ=DAILY", ""), "timeZone", `unknown time zone "Europe/Atlantis"`},
			{seriesBody(start, "Europe/Berlin", "FREQ=DAILY;BYYEARDAY=10", ""), "rrule", "part BYYEARDAY is not supported"},
			{seriesBody(start, "Europe/Berlin", "FREQ=HOURLY", ""), "rrule", "FREQ=HOURLY is not supported"},
			{seriesBody("2020-01-01T09:00:00", "Europe/Berlin", "FREQ=DAILY;COUNT=3", ""), "rrule", "has no occurrence"},
			{seriesBody(start, "Europe/Berlin", dense, ""), "rrule", "more than 1000 occurrences within the series horizon"},
			{seriesBody(start+"Z", "Europe/Berlin", "FREQ=DAILY", ""), "start", "without an offset"},
			{seriesBody(start, "Europe/Berlin", "FREQ=DAILY", `,"publishWithin":"P1M"`), "publishWithin", "months"},
			{`{"title":"t","content":"c","timeZone":"UTC","start":"2030-01-01T00:00:00"}`, "rrule", "is required"},
			{`{"title":"t","content":"c","timeZone":"UTC","start":"2030-01-01T00:00:00","rrule":"FREQ=DAILY","every":1}`, "every", "unknown field"},
		} {
			resp, body := e.do(t, http.MethodPost, "/api/v1/series", "application/json", c.body)
			p := requireProblem(t, resp, body, http.StatusBadRequest)
			require.Equal(t, c.field, p.Field, c.body)
			require.Contains(t, p.Detail, c.detail, c.body)
		}
		resp, body := e.do(t, http.MethodGet, "/api/v1/posts?seriesId=x", "", "")
		require.Equal(t, "seriesId", requireProblem(t, resp, body, http.StatusBadRequest).Field)
		check()
		var n int64
		require.NoError(t, e.db.Model(&reservation.Series{}).Count(&n).Error)
		require.Zero(t, n)
	})
}

// Another owner's series is 404; the list holds one's own; a non-admin may
// not list another owner's.
func TestSeriesAreTheirOwnersOverHTTP(t *testing.T) {
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
		start, _ := tomorrowIn(t, "UTC")
		alice, bob := tokenFor(t, "alice"), tokenFor(t, "bob")
		resp, body := e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=WEEKLY", ""))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		id := decodeObject(t, body)["id"]
		require.Equal(t, "alice", decodeObject(t, body)["ownerId"])
		resp, body = e.doAs(t, bob, http.MethodGet, fmt.Sprintf("/api/v1/series/%v", id), "")
		requireProblem(t, resp, body, http.StatusNotFound)
		resp, body = e.doAs(t, bob, http.MethodPatch, fmt.Sprintf("/api/v1/series/%v", id), `{"title":"mine"}`)
		requireProblem(t, resp, body, http.StatusNotFound)
		resp, body = e.doAs(t, bob, http.MethodGet, "/api/v1/series", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), `"items":[]`)
		resp, body = e.doAs(t, bob, http.MethodGet, "/api/v1/series?ownerId=alice", "")
		requireProblem(t, resp, body, http.StatusForbidden)
		resp, body = e.doAs(t, alice, http.MethodGet, "/api/v1/series?ownerId=alice", "")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), fmt.Sprintf(`"id":%v`, id))
	})
}

// A series create or edit spends one write per occurrence within the
// horizon (the posts it makes or changes), at most the whole limit; one
// that needs more than the caller has left is 429 and writes nothing.
func TestSeriesWritesSpendOneWritePerOccurrence(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		e := apiSetup(t, db, func(c *api.Config) {
			c.Auth = verifier(t, testSecret, "")
			c.WriteLimit = api.WriteLimit{Requests: 20, Window: time.Hour}
		})
		start, _ := tomorrowIn(t, "UTC")
		alice, bob := tokenFor(t, "alice"), tokenFor(t, "bob")
		resp, body := e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=DAILY;BYHOUR=9,10;COUNT=5", ""))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		require.Equal(t, "15", resp.Header.Get("X-RateLimit-Remaining"))
		id := decodeObject(t, body)["id"]
		resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=DAILY;BYHOUR=9,10;COUNT=7", ""))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		require.Equal(t, "8", resp.Header.Get("X-RateLimit-Remaining"))
		posts, _ := counts(t, db.DB)
		require.EqualValues(t, 12, posts, "12 writes: 12 posts")

		check := writesNothing(t, db.DB)
		resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=DAILY;BYHOUR=9,10;COUNT=9", ""))
		p := requireProblem(t, resp, body, http.StatusTooManyRequests)
		require.Contains(t, p.Detail, "this one's 9 are more than the 8 writes left")
		require.Equal(t, "3600", resp.Header.Get("Retry-After"))
		check()
		var n int64
		require.NoError(t, db.Model(&reservation.Series{}).Count(&n).Error)
		require.EqualValues(t, 2, n, "the refused series is not stored")

		// An edit changes the 5 posts of the first series: 5 writes.
		resp, body = e.doAs(t, alice, http.MethodPatch, fmt.Sprintf("/api/v1/series/%v", id), `{"title":"Renamed"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "3", resp.Header.Get("X-RateLimit-Remaining"))
		resp, body = e.doAs(t, alice, http.MethodPatch, fmt.Sprintf("/api/v1/series/%v", id), `{"title":"Again"}`)
		require.Contains(t, requireProblem(t, resp, body, http.StatusTooManyRequests).Detail, "5 are more than the 3 writes left")
		require.Equal(t, "Renamed", decodeObject(t, mustGet(t, e, alice, fmt.Sprintf("/api/v1/series/%v", id)))["title"])
		// Bad input is answered before any write is spent.
		resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "Europe/Atlantis", "FREQ=DAILY", ""))
		requireProblem(t, resp, body, http.StatusBadRequest)
		resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=DAILY;BYHOUR=9,10;COUNT=3", ""))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		require.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
		resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=DAILY;BYHOUR=9,10;COUNT=1", ""))
		requireProblem(t, resp, body, http.StatusTooManyRequests)

		// Denser than the whole limit: 24 posts spend the 20 writes of a
		// window rather than never passing.
		resp, body = e.doAs(t, bob, http.MethodPost, "/api/v1/series", seriesBody(start, "UTC", "FREQ=DAILY;BYHOUR=9,10,11,12;COUNT=24", ""))
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		require.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
		require.NoError(t, db.Model(&reservation.Post{}).Where("owner_id = ?", "bob").Count(&n).Error)
		require.EqualValues(t, 24, n)
		resp, body = e.doAs(t, bob, http.MethodPost, "/api/v1/posts", newPostBody)
		requireProblem(t, resp, body, http.StatusTooManyRequests)
	})
}

func mustGet(t *testing.T, e *apiEnv, token, path string) []byte {
	t.Helper()
	resp, body := e.doAs(t, token, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return body
}
