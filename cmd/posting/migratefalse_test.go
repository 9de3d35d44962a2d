package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
)

// With POSTING_MIGRATE=false on a fresh database serve and worker stop at
// once, naming the missing tables and the setting, and create none; on a
// migrated database serve starts.
func TestMigrateFalse(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	env := []string{"POSTING_MIGRATE=false", "POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}
	for _, cmd := range []string{"serve", "worker"} {
		out, code := runBinary(t, env, cmd)
		require.Equal(t, 1, code, "%s: %s", cmd, out)
		require.Regexp(t, `has no table posts, .*POSTING_MIGRATE=false: run `+"`posting migrate`", out, cmd)
	}
	db, err := database.Open("", dataDir)
	require.NoError(t, err)
	for _, table := range []string{"posts", "outbox", "inbox", "publications", "goose_db_version"} {
		require.False(t, db.Migrator().HasTable(table), "serve and worker created %s", table)
	}
	require.NoError(t, db.Close())

	out, code := runBinary(t, nil, "migrate", "--data-dir", dataDir)
	require.Equal(t, 0, code, out)
	p := startServe(t, env...)
	p.Terminate(t)
	require.Contains(t, p.Out.String(), "migrations skipped")
}
