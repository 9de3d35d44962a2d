package api_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// BenchmarkCreatePost measures POST /api/v1/posts through the handler
// (no network) on SQLite: the post and its outbox row in one transaction.
// It compiles against the API before tracing too, so the two can be
// compared.
func BenchmarkCreatePost(b *testing.B) {
	db := databasetest.NewSQLite(b)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	if err != nil {
		b.Fatal(err)
	}
	h, err := api.NewHandler(api.Config{Posts: svc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(fmt.Sprintf(`{"title":"t","content":"c","scheduledAt":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	b.ResetTimer()
	for b.Loop() {
		benchCreate(b, h, body)
	}
}

// BenchmarkCreate runs POST /api/v1/posts through the handler in process
// (no network) on MySQL, 32 requests at a time, to show what a create costs
// in CPU and allocations besides its two inserts:
//
//	POSTING_TEST_REQUIRE_MYSQL=1 go test -run '^$' -bench BenchmarkCreate -benchmem -cpuprofile /tmp/create.prof ./internal/write/api/
func BenchmarkCreate(b *testing.B) {
	db := databasetest.NewMySQL(b)
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
	require.NoError(b, err)
	h, err := api.NewHandler(api.Config{Posts: svc, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	body := []byte(`{"title":"bench post","content":"A post written by the create benchmark, about as long as a short announcement.","scheduledAt":"` +
		time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339) + `"}`)
	b.SetParallelism(16) // 32 on 2 cores
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchCreate(b, h, body)
		}
	})
}

// benchCreate sends body to h as POST /api/v1/posts and fails b unless a
// post was created.
func benchCreate(b *testing.B, h http.Handler, body []byte) {
	req := httptest.NewRequest(http.MethodPost, "/api/v1/posts", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		b.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}
