package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// docs/configuration.md names every setting a command's --help lists, and
// nothing that no command reads: a setting added without its line on the
// page, or a line left for a setting that is gone, fails here.
func TestConfigurationPageNamesEverySettingOfHelp(t *testing.T) {
	t.Parallel()
	twin := regexp.MustCompile(`\(env (POSTING_[A-Z0-9_]+)\)`)
	inHelp := map[string]bool{}
	var visit func(path []string, cmd *cobra.Command)
	visit = func(path []string, cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			p := append(append([]string{}, path...), sub.Name())
			var out bytes.Buffer
			require.NoError(t, Run(context.Background(), append(p, "--help"), &out, &out), "%v --help", p)
			for _, m := range twin.FindAllStringSubmatch(out.String(), -1) {
				inHelp[m[1]] = true
			}
			visit(p, sub)
		}
	}
	visit(nil, newRootCommand(io.Discard, io.Discard))
	require.Contains(t, inHelp, "POSTING_DATABASE_URL", "the walk reached the commands")

	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	require.NoError(t, err)
	onPage := map[string]bool{}
	for _, m := range regexp.MustCompile(`POSTING_[A-Z0-9_]+`).FindAllString(string(page), -1) {
		onPage[m] = true
	}
	require.Empty(t, missing(inHelp, onPage), "settings of --help missing from docs/configuration.md")
	require.Empty(t, missing(onPage, inHelp), "settings on docs/configuration.md that no command's --help lists")
}

// missing lists the keys of a that b lacks, sorted.
func missing(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
