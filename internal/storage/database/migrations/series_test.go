package migrations_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
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

// A start killed inside 00012 on MySQL (which commits each statement on
// its own) leaves the statements before the kill applied; whichever it
// followed, the next start finishes the migration.
func TestMySQLStartAfterAKillInsideTheSeriesMigration(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("mysql/00012_series.sql")
	require.NoError(t, err)
	up := strings.SplitN(strings.SplitN(string(raw), "-- +goose Up", 2)[1], "-- +goose Down", 2)[0]
	var code []string
	for _, l := range strings.Split(up, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			code = append(code, l)
		}
	}
	var stmts []string
	for _, s := range strings.Split(strings.Join(code, "\n"), ";") {
		if s := strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	require.Len(t, stmts, 3)
	for k := 1; k < len(stmts); k++ {
		t.Run(fmt.Sprintf("killed after statement %d of %d", k, len(stmts)), func(t *testing.T) {
			t.Parallel()
			db := databasetest.Open(t, freshURL(t, database.MySQL))
			sqlDB, err := db.DB.DB()
			require.NoError(t, err)
			p, err := goose.NewProvider(goose.DialectMySQL, sqlDB, os.DirFS("mysql"), goose.WithDisableGlobalRegistry(true))
			require.NoError(t, err)
			_, err = p.UpTo(context.Background(), 11)
			require.NoError(t, err)
			for _, s := range stmts[:k] {
				require.NoError(t, db.Exec(s).Error, s)
			}
			after := 0 // 00012 and the migrations after it
			for _, src := range p.ListSources() {
				if src.Version > 11 {
					after++
				}
			}
			n, err := migrations.Apply(context.Background(), db, nil)
			require.NoError(t, err, "a start after the kill")
			require.Equal(t, after, n)
			require.True(t, db.Migrator().HasColumn("posts", "series_exception"))
		})
	}
}
