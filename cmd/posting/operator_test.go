package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// Every operator command says on stderr which database it read: the SQLite
// file's absolute path, or the URL with its password masked; stdout stays
// the command's answer alone.
func TestOperatorCommandsNameTheirDatabase(t *testing.T) {
	t.Parallel()
	lite := outboxSetup(t, database.SQLite)
	path, err := filepath.Abs(lite.db.Location[len("sqlite://"):])
	require.NoError(t, err)
	for _, args := range [][]string{{"outbox", "stats"}, {"outbox", "list"}, {"publications", "list"}, {"posts", "overdue"}} {
		out, errOut, code := runCLI(t, append(args, "--database-url", lite.url)...)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `msg="reading database" .*database=`+regexp.QuoteMeta(path)+`\n`, errOut, args)
		require.NotContains(t, out, "reading database", args)
	}

	pg := outboxSetup(t, database.PostgreSQL)
	u, err := url.Parse(pg.url)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "hunter2-secret") // trust auth ignores it
	_, errOut, code := runCLI(t, "outbox", "stats", "--database-url", u.String())
	require.Equal(t, 0, code, errOut)
	u.RawQuery = ""
	require.Contains(t, errOut, "database="+u.Redacted())
	require.Contains(t, errOut, ":xxxxx@")
	require.NotContains(t, errOut, "hunter2-secret")
}

// Operator commands only read or change existing data: run where there is
// no database (the embedded default of another folder, or a sqlite:// URL
// to a missing file), they say where they looked and what to do, exit 1,
// and create nothing: no file, no data dir.
func TestOutboxCommandsNeverCreateADatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"outbox", "stats"},
		{"outbox", "stats", "--json"},
		{"outbox", "list", "--status", "FAIL"},
		{"outbox", "requeue", "--all-failed"},
		{"outbox", "requeue", "12"},
		{"outbox", "discard", "12"},
		{"outbox", "purge", "--older-than", "168h"},
		{"posts", "overdue"},
	} {
		dir := t.TempDir()
		dataDir := filepath.Join(dir, "data")
		embedded := append(append([]string{}, args...), "--data-dir", dataDir, "--database-url=")
		_, stderr, code := runCLI(t, embedded...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "posting: no database at "+filepath.Join(dataDir, "posting.db")+
			"; run from the folder of `posting serve` or set --database-url / POSTING_DATABASE_URL", args)
		require.NotContains(t, stderr, "no such table", args)

		file := filepath.Join(dir, "elsewhere", "ops.db")
		viaURL := append(append([]string{}, args...), "--database-url", "sqlite://"+file)
		_, stderr, code = runCLI(t, viaURL...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "posting: no database at "+file+"; run from the folder of `posting serve`", args)

		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "%v created something", args)
	}
}

// serve, worker and migrate still create the embedded database: migrate
// here, from a data dir that does not exist yet.
func TestMigrateCreatesTheEmbeddedDatabase(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "new", "data")
	var out, errOut bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"migrate", "--data-dir", dataDir, "--database-url="}, &out, &errOut))
	require.FileExists(t, filepath.Join(dataDir, "posting.db"))
	require.Regexp(t, `applied [1-9][0-9]* migrations`, out.String())

	// And now the operator commands find it.
	stdout, stderr, code := runCLI(t, "outbox", "stats", "--data-dir", dataDir, "--database-url=")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "PENDING")
}

// A MySQL database that does not exist: migrate says to create it, exit 1.
func TestMigrateUnknownMySQLDatabaseSaysCreateIt(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(databasetest.MySQLURL(t, "exists")) // skips without a server
	require.NoError(t, err)
	u.Path = "/newcomer_" + filepath.Base(t.TempDir())
	var out, errOut bytes.Buffer
	err = Run(context.Background(), []string{"migrate", "--database-url", u.String()}, &out, &errOut)
	require.Error(t, err)
	require.Equal(t, 1, exitCode(err, &errOut))
	require.Contains(t, errOut.String(), "Unknown database '"+u.Path[1:]+"'")
	require.Contains(t, errOut.String(), "create it first: CREATE DATABASE `"+u.Path[1:]+"`")
}

// A PostgreSQL database that does not exist: migrate says to create it, exit 1.
func TestMigrateUnknownPostgresDatabaseSaysCreateIt(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(databasetest.PostgresURL(t, "exists")) // skips without a server
	require.NoError(t, err)
	u.Path = "/newcomer_" + strings.ToLower(filepath.Base(t.TempDir()))
	var out, errOut bytes.Buffer
	err = Run(context.Background(), []string{"migrate", "--database-url", u.String()}, &out, &errOut)
	require.Error(t, err)
	require.Equal(t, 1, exitCode(err, &errOut))
	require.Contains(t, errOut.String(), `database "`+u.Path[1:]+`" does not exist`)
	require.Contains(t, errOut.String(), `create it first: CREATE DATABASE "`+u.Path[1:]+`"`)
}
