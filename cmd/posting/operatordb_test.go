package main

import (
	"net/url"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
)

// Every operator command says on stderr which database it read: the SQLite
// file's absolute path, or the URL with its password masked; stdout stays
// the command's answer alone.
func TestOperatorCommandsNameTheirDatabase(t *testing.T) {
	t.Parallel()
	lite := outboxSetup(t, database.SQLite)
	path, err := filepath.Abs(lite.db.Location[len("sqlite://"):])
	require.NoError(t, err)
	for _, args := range [][]string{{"outbox", "stats"}, {"outbox", "list"}, {"publications", "list"}} {
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
