package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// newVersionCommand is `posting version`: the module version and the VCS
// revision the binary was built from, as Go's build info records them.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and the VCS revision of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}

// versionText is what `posting version` prints: module path and version,
// then the revision, its time and whether the tree had changes, and the Go
// version. A field the build did not record says "unknown".
func versionText() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "posting: no build information in this binary\n"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	modified := ""
	if settings["vcs.modified"] == "true" {
		modified = " (modified)"
	}
	return fmt.Sprintf("%s %s\nrevision %s%s\ncommitted %s\n%s\n",
		bi.Main.Path, or(bi.Main.Version, "(devel)"),
		or(settings["vcs.revision"], "unknown"), modified, or(settings["vcs.time"], "unknown"), bi.GoVersion)
}
