package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// A flag given on the command line wins over its environment twin, even when
// the twin holds a value that would be refused.
func TestFlagBeatsItsEnvTwin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flagDB, envDB := filepath.Join(dir, "flag.db"), filepath.Join(dir, "env.db")
	out, code := runBinary(t, []string{"POSTING_DATABASE_URL=sqlite://" + envDB, "POSTING_LOG_FORMAT=xml"},
		"migrate", "--database-url", "sqlite://"+flagDB, "--log-format", "text")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "migrations to sqlite://"+flagDB)
	require.FileExists(t, flagDB)
	require.NoFileExists(t, envDB, "the environment's database was not touched")

	// Without the flags the twins count: the bad log format stops it.
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=sqlite://" + envDB, "POSTING_LOG_FORMAT=xml"}, "migrate")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `POSTING_LOG_FORMAT="xml"`)
}

// --help names the environment twin of every flag that has one; a
// subcommand's own flags, which are not read from the environment, name
// none.
func TestHelpNamesEveryEnvTwin(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{{"serve"}, {"worker"}, {"migrate"}} {
		var out bytes.Buffer
		require.NoError(t, Run(context.Background(), append(path, "--help"), &out, &out))
		help := out.String()
		cmd, _, err := newRootCommand(io.Discard, io.Discard).Find(path)
		require.NoError(t, err)
		n := 0
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			line := regexp.MustCompile(`(?m)^.*--` + regexp.QuoteMeta(f.Name) + `\b.*$`).FindString(help)
			require.NotEmpty(t, line, "%v --help lists --%s", path, f.Name)
			if f.Name == "help" {
				return
			}
			n++
			require.Contains(t, line, "(env "+envName(f.Name)+")", "%v --help", path)
		})
		require.Positive(t, n, "%v has flags", path)
	}
	var out bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"outbox", "list", "--help"}, &out, &out))
	require.Contains(t, out.String(), "(env POSTING_DATABASE_URL)")
	require.Contains(t, out.String(), "(env POSTING_LOG_FORMAT)")
	require.NotContains(t, out.String(), "POSTING_STATUS", "outbox list --status has no twin")
	require.NotContains(t, out.String(), "POSTING_JSON", "nor --json")
}
