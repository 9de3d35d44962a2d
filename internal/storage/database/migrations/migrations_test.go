package migrations_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
)

// The helper has already migrated the database once; a second run must apply
// nothing, and every table of the contract must exist with its columns.
func TestUpTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := databasetest.New(t, d)
			ctx := context.Background()
			n, err := migrations.Apply(ctx, db, nil)
			require.NoError(t, err)
			require.Equal(t, 0, n, "second run applied migrations")

			m := db.Migrator()
			for table, cols := range map[string][]string{
				"posts": {"id", "title", "content", "status", "scheduled_at", "created_at", "updated_at", "published_at", "version"},
				"outbox": {"id", "event_id", "event_type", "aggregate_id", "payload", "created", "status", "retry_count",
					"version", "next_attempt_at", "claimed_by", "claimed_at", "sent_at", "last_error", "discarded_at", "unsent_aggregate_id"},
				"inbox":            {"consumer", "event_id", "processed_at"},
				"publications":     {"post_id", "event_id", "partition_id", "scheduled_at", "status", "published_at"},
				"idempotency_keys": {"id", "owner_id", "idem_key", "request_hash", "post_id", "response", "created_at"},
			} {
				require.True(t, m.HasTable(table), "table %s", table)
				for _, c := range cols {
					require.True(t, m.HasColumn(table, c), "column %s.%s", table, c)
				}
			}
			for _, idx := range []string{"idx_outbox_status_created_id", "idx_outbox_unsent_aggregate_id", "idx_outbox_aggregate_id"} {
				require.True(t, m.HasIndex("outbox", idx), "index %s", idx)
			}
			require.True(t, m.HasIndex("publications", "idx_publications_status_partition"))
			require.True(t, m.HasIndex("idempotency_keys", "uq_idempotency_keys_owner_key"))
			require.True(t, m.HasIndex("idempotency_keys", "idx_idempotency_keys_created_at"))
		})
	}
}

// A fresh, empty database gets the whole schema from Up.
func TestUpOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	_, err = sqlDB.Exec("DROP TABLE idempotency_keys; DROP TABLE publications; DROP TABLE inbox; DROP TABLE outbox; DROP TABLE posts; DROP TABLE goose_db_version")
	require.NoError(t, err)
	n, err := migrations.Up(context.Background(), sqlDB, database.SQLite, nil)
	require.NoError(t, err)
	files, err := filepath.Glob("sqlite/*.sql")
	require.NoError(t, err)
	require.Equal(t, len(files), n, "every migration applied")
	require.True(t, db.Migrator().HasTable("outbox"))
}

// MySQL commits each DDL statement on its own, so a start killed inside
// migration 00001 leaves the first table created and the migration not
// recorded. The next start must finish it, not fail on "already exists" until
// someone drops the tables by hand.
func TestMySQLStartAfterAKillInsideTheFirstMigration(t *testing.T) {
	t.Parallel()
	url := freshURL(t, database.MySQL)
	db := databasetest.Open(t, url)
	init, err := os.ReadFile("mysql/00001_init.sql")
	require.NoError(t, err)
	first := strings.SplitN(strings.SplitN(string(init), "-- +goose Up", 2)[1], ";", 2)[0]
	require.Contains(t, first, "posts (")
	require.NoError(t, db.Exec(first).Error) // CREATE TABLE posts, as a killed start left it
	n, err := migrations.Apply(context.Background(), db, nil)
	require.NoError(t, err, "a start after the kill")
	require.Equal(t, migrationCount(t, database.MySQL), n)
}
