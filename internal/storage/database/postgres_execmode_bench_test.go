package database_test

import (
	"fmt"
	"testing"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
)

// The cost of the exec mode the service uses (QueryExecModeExec: one round
// trip, nothing prepared) against pgx's default statement cache, on a
// direct connection: an insert and a read by key per operation.
//
//	go test -run '^$' -bench PostgresQueryExecMode -benchtime 2000x ./internal/storage/database/
func BenchmarkPostgresQueryExecMode(b *testing.B) {
	for _, mode := range []string{"exec", "cache_statement"} {
		b.Run(mode, func(b *testing.B) {
			db, err := database.Open(databasetest.PostgresURL(b, "")+"&default_query_exec_mode="+mode, "")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := migrations.Apply(b.Context(), db, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("bench-%d", i)
				if err := db.Exec("INSERT INTO inbox (event_id, consumer, event_type, processed_at) VALUES (?, ?, ?, clock_timestamp())", key, "bench", "post.created").Error; err != nil {
					b.Fatal(err)
				}
				var n int64
				if err := db.Raw("SELECT count(*) FROM inbox WHERE event_id = ? AND consumer = ?", key, "bench").Scan(&n).Error; err != nil || n != 1 {
					b.Fatal(n, err)
				}
			}
		})
	}
}
