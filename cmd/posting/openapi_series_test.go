package main

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
)

// The series routes' answers, success and refusal, and the occurrence
// posts with their series fields validate against the document; the
// request schemas refuse what the server refuses and pass what it takes.
func TestOpenAPISeriesResponses(t *testing.T) {
	t.Parallel()
	doc, router := loadOpenAPI(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := &oaFixture{doc: doc, router: router, h: oaHandler(t, db, nil)}
		const js = "application/json"
		start := time.Now().UTC().AddDate(0, 0, 1).Format("2006-01-02") + "T09:30:00"
		body := f.exchange(t, "POST", "/api/v1/series", js, fmt.Sprintf(
			`{"title":"t","content":"c","timeZone":"Europe/Berlin","start":%q,"rrule":"FREQ=DAILY;COUNT=20","publishWithin":"PT1H"}`, start),
			"", http.StatusCreated)
		var s api.SeriesJSON
		require.NoError(t, json.Unmarshal(body, &s))
		path := fmt.Sprintf("/api/v1/series/%d", s.ID)
		f.exchange(t, "GET", path, "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/api/v1/series?limit=1&status=ACTIVE", "", "", "", http.StatusOK)
		f.exchange(t, "GET", "/admin/series?limit=5", "", "", "admin", http.StatusOK)
		body = f.exchange(t, "GET", fmt.Sprintf("/api/v1/posts?seriesId=%d", s.ID), "", "", "", http.StatusOK)
		var page api.PostListJSON
		require.NoError(t, json.Unmarshal(body, &page))
		require.NotEmpty(t, page.Items)
		f.exchange(t, "PATCH", fmt.Sprintf("/api/v1/posts/%d", page.Items[0].ID), js, `{"content":"mine"}`, "", http.StatusOK)
		f.exchange(t, "PATCH", path, js, `{"rrule":"FREQ=WEEKLY","publishWithin":null}`, "", http.StatusOK)
		f.exchange(t, "POST", path+"/cancel", "", "", "", http.StatusOK)
		f.exchange(t, "POST", path+"/cancel", "", "", "", http.StatusConflict)
		f.exchange(t, "PATCH", path, js, `{"title":"x"}`, "", http.StatusConflict)
		f.exchange(t, "GET", "/api/v1/series/999999", "", "", "", http.StatusNotFound)
		f.exchange(t, "GET", "/api/v1/series?colour=red", "", "", "", http.StatusBadRequest)
		f.exchange(t, "POST", "/api/v1/series", js, `{"title":"t"}`, "", http.StatusBadRequest)
		f.exchange(t, "POST", "/api/v1/series", "text/plain", `{}`, "", http.StatusUnsupportedMediaType)
		f.exchange(t, "POST", "/api/v1/series", js, fmt.Sprintf(
			`{"title":"t","content":"c","timeZone":"Mars/Base","start":%q,"rrule":"FREQ=DAILY"}`, start), "", http.StatusBadRequest)
	})
}
