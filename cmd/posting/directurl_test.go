package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

// POSTING_DATABASE_DIRECT_URL is refused with exit status 2 naming it when
// it cannot be the direct URL of a PostgreSQL database: beside a SQLite
// database, or with another scheme; nothing is migrated then.
func TestDatabaseDirectURLBadValueExits2(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_DATABASE_DIRECT_URL=postgres://127.0.0.1/x"}, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL")
	require.Contains(t, out, "PostgreSQL database behind a pooler")

	pg := databasetest.PostgresURL(t, "direct")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + pg, "POSTING_DATABASE_DIRECT_URL=mysql://root@127.0.0.1/x"}, "migrate")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `POSTING_DATABASE_DIRECT_URL="mysql://root@127.0.0.1/x"`)
	db, err := database.Open(pg, "")
	require.NoError(t, err)
	defer db.Close()
	require.False(t, db.Migrator().HasTable("posts"), "the refused run migrated")

	// A direct URL that reaches another database is a bad setting too.
	other := databasetest.PostgresURL(t, "direct_other")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + pg, "POSTING_DATABASE_DIRECT_URL=" + other}, "migrate")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL reaches database")
	require.False(t, db.Migrator().HasTable("posts"), "the refused run migrated")
}
