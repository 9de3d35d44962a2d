package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

// The series migration goes up, down and up again on each database, and
// its key refuses a second row of one (series, occurrence).
func TestSeriesMigrationGoesDownAndUp(t *testing.T) {
	t.Parallel()
	for d, gd := range map[database.Dialect]goose.Dialect{
		database.MySQL: goose.DialectMySQL, database.PostgreSQL: goose.DialectPostgres, database.SQLite: goose.DialectSQLite3,
	} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := databasetest.Open(t, freshURL(t, d))
			sqlDB, err := db.DB.DB()
			require.NoError(t, err)
			p, err := goose.NewProvider(gd, sqlDB, os.DirFS(string(d)), goose.WithDisableGlobalRegistry(true))
			require.NoError(t, err)
			ctx := context.Background()
			_, err = p.Up(ctx)
			require.NoError(t, err)
			m := db.Migrator()
			for table, cols := range map[string][]string{
				"series": {"id", "owner_id", "title", "content", "time_zone", "start_local", "rrule", "publish_within",
					"status", "materialized_until", "created_at", "updated_at", "version"},
				"series_occurrences": {"series_id", "occurrence", "post_id"},
				"posts":              {"series_id", "occurrence", "series_exception"},
			} {
				for _, c := range cols {
					require.True(t, m.HasColumn(table, c), "column %s.%s", table, c)
				}
			}
			require.True(t, m.HasIndex("posts", "idx_posts_series_id"))
			require.NoError(t, db.Exec("INSERT INTO series_occurrences (series_id, occurrence) VALUES (1, '2026-03-29 02:30:00')").Error)
			require.Error(t, db.Exec("INSERT INTO series_occurrences (series_id, occurrence) VALUES (1, '2026-03-29 02:30:00')").Error)

			_, err = p.DownTo(ctx, 11)
			require.NoError(t, err)
			require.False(t, m.HasTable("series"))
			require.False(t, m.HasTable("series_occurrences"))
			require.False(t, m.HasColumn("posts", "series_id"))
			_, err = p.Up(ctx)
			require.NoError(t, err)
			require.True(t, m.HasColumn("posts", "series_exception"))
		})
	}
}
