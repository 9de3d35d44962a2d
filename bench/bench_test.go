package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/bench"
	"github.com/postingsvc/posting/database/databasetest"
)

// BenchmarkRawCreate is the yardstick of BenchmarkCreate in api/: the same
// two rows per create in plain SQL, 32 clients, for 3 s on MySQL; it
// reports posts/s (b.N is ignored; run with -benchtime 1x):
//
//	POSTING_TEST_REQUIRE_MYSQL=1 go test -run '^$' -bench RawCreate -benchtime 1x -cpuprofile /tmp/raw.prof ./bench/
func BenchmarkRawCreate(b *testing.B) {
	db := databasetest.NewMySQL(b)
	b.ResetTimer()
	res, err := bench.RawCreate(context.Background(), db, 32, 3*time.Second)
	require.NoError(b, err)
	b.ReportMetric(res.PerSecond(), "posts/s")
}
