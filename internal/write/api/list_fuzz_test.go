package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// FuzzListQuery: whatever the query string of GET /api/v1/posts, the answer
// is a page (200) or a refusal naming what is wrong (400), never a 500: a
// bound or a cursor the database cannot compare (a year outside 1..9999 on
// MariaDB and PostgreSQL) is refused before the query runs. It runs on
// MariaDB where CI has it (POSTING_TEST_REQUIRE_MYSQL=1), whose DATETIME
// refuses such years, else on SQLite.
func FuzzListQuery(f *testing.F) {
	for _, seed := range []string{
		"", "limit=1", "status=RESERVED&order=scheduledAt", "scheduledFrom=0000-01-01T00:00:00Z",
		"scheduledFrom=9999-12-31T23:59:59-23:59", "scheduledTo=0001-01-01T00:00:00%2B23:59",
		"order=scheduledAt&cursor=OTIyMzM3MjAzNjg1NDc3NTgwNzox", "order=scheduledAt&cursor=MjUzNDAyMzAwODAwMDAwMDAwOjE",
		"order=scheduledAt&cursor=LTkyMjMzNzIwMzY4NTQ3NzU4MDc6MQ", "cursor=OTIyMzM3MjAzNjg1NDc3NTgwNw",
		"ownerId=%FF%FE", "limit=1;x", "status=EXPIRED",
	} {
		f.Add(seed)
	}
	dialect := database.SQLite
	if os.Getenv("POSTING_TEST_REQUIRE_MYSQL") == "1" {
		dialect = database.MySQL
	}
	db := databasetest.New(f, dialect)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{Now: func() time.Time { return time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC) }})
	require.NoError(f, err)
	_, err = svc.Create(f.Context(), reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC)})
	require.NoError(f, err)
	h, err := NewHandler(Config{Posts: svc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/posts", nil)
		req.URL.RawQuery = query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest:
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "%q", query)
		default:
			t.Fatalf("GET /api/v1/posts?%s answered %d: %s", query, rec.Code, rec.Body)
		}
	})
}
