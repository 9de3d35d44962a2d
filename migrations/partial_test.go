package migrations_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/migrations"
)

// MySQL commits each DDL statement on its own, so a start killed inside
// migration 00001 leaves the first table created and the migration not
// recorded. The next start must finish it, not fail on "already exists" until
// someone drops the tables by hand.
func TestMySQLStartAfterAKillInsideTheFirstMigration(t *testing.T) {
	t.Parallel()
	url := freshURL(t, database.MySQL)
	db, err := database.Open(url, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	init, err := os.ReadFile("mysql/00001_init.sql")
	require.NoError(t, err)
	first := strings.SplitN(strings.SplitN(string(init), "-- +goose Up", 2)[1], ";", 2)[0]
	require.Contains(t, first, "posts (")
	require.NoError(t, db.Exec(first).Error) // CREATE TABLE posts, as a killed start left it
	n, err := migrations.Apply(context.Background(), db, nil)
	require.NoError(t, err, "a start after the kill")
	require.Equal(t, migrationCount(t, database.MySQL), n)
}
