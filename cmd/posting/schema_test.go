package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
)

// With POSTING_MIGRATE=false on a database a migration behind (every table
// there, 00011's columns not), worker and serve stop at once naming the
// versions and `posting migrate`: a worker started there claimed each post
// with a column the schema lacks, failed every attempt and published
// nothing.
func TestMigrateFalseOnAnOlderSchemaStops(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	out, code := runBinary(t, nil, "migrate", "--data-dir", dataDir)
	require.Equal(t, 0, code, out)
	db, err := database.Open("", dataDir)
	require.NoError(t, err)
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	p, err := goose.NewProvider(goose.DialectSQLite3, sqlDB, os.DirFS("../../internal/storage/database/migrations/sqlite"), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	sources := p.ListSources()
	latest := sources[len(sources)-1].Version
	_, err = p.DownTo(context.Background(), 10)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	env := []string{"POSTING_MIGRATE=false", "POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}
	out, code = runBinary(t, env, "worker")
	require.Equal(t, 1, code, out)
	require.Regexp(t, fmt.Sprintf("schema version 10, this binary needs %d, and POSTING_MIGRATE=false: run `posting migrate`", latest), out)
	out, code = runBinary(t, env, "serve") // 00011's leases table is missing too
	require.Equal(t, 1, code, out)
	require.Regexp(t, "POSTING_MIGRATE=false: run `posting migrate`", out)
}
