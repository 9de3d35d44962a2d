package migrations_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
)

// MySQL commits each DDL statement on its own, so a start killed inside
// 00011 leaves the statements before the kill applied and the migration not
// recorded. Whichever statement the kill followed, the next start finishes
// the migration instead of failing on "Duplicate column name" at every start
// until someone repairs the schema by hand.
func TestMySQLStartAfterAKillInsideThePostsExpiryMigration(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("mysql/00011_posts_expiry.sql")
	require.NoError(t, err)
	up := strings.SplitN(strings.SplitN(string(raw), "-- +goose Up", 2)[1], "-- +goose Down", 2)[0]
	var code []string // the comments hold semicolons too
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
	require.Greater(t, len(stmts), 1)
	for k := 1; k < len(stmts); k++ {
		t.Run(fmt.Sprintf("killed after statement %d of %d", k, len(stmts)), func(t *testing.T) {
			t.Parallel()
			db := databasetest.Open(t, freshURL(t, database.MySQL))
			sqlDB, err := db.DB.DB()
			require.NoError(t, err)
			p, err := goose.NewProvider(goose.DialectMySQL, sqlDB, os.DirFS("mysql"), goose.WithDisableGlobalRegistry(true))
			require.NoError(t, err)
			_, err = p.UpTo(context.Background(), 10)
			require.NoError(t, err)
			for _, s := range stmts[:k] {
				require.NoError(t, db.Exec(s).Error, s)
			}
			n, err := migrations.Apply(context.Background(), db, nil)
			require.NoError(t, err, "a start after the kill")
			later, err := filepath.Glob("mysql/0001[1-9]_*.sql")
			require.NoError(t, err)
			require.Equal(t, len(later), n, "00011 and every later migration")
		})
	}
}

// 00011 goes down and up again on MySQL.
func TestMySQLPostsExpiryMigrationGoesDownAndUp(t *testing.T) {
	t.Parallel()
	db := databasetest.Open(t, freshURL(t, database.MySQL))
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectMySQL, sqlDB, os.DirFS("mysql"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = p.Up(ctx)
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 10)
	require.NoError(t, err)
	require.False(t, db.Migrator().HasTable("leases"))
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.True(t, db.Migrator().HasColumn("posts", "publish_by"))
}
