package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// Not parallel: the collector's target is the test process's.
func TestCommandsRaiseTheGCTargetUnlessGOGCIsSet(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(before) })

	debug.SetGCPercent(100)
	unset := func(string) (string, bool) { return "", false }
	require.Equal(t, defaultGCPercent, setDefaultGCPercent(unset))
	require.Equal(t, defaultGCPercent, gcPercent())

	// An operator's GOGC (here 50, as the runtime read it at start) stands.
	debug.SetGCPercent(50)
	set := func(name string) (string, bool) { return "50", name == "GOGC" }
	require.Equal(t, 50, setDefaultGCPercent(set))
	require.Equal(t, 50, gcPercent())
}

// GOGC set but empty (GOGC= in an env file, a template's blank) is no
// operator's choice: the runtime reads it as unset, its default of 100, and
// so does the command, which raises the target as when GOGC is absent.
func TestAnEmptyGOGCCountsAsUnset(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(before) })

	debug.SetGCPercent(100) // what the runtime made of GOGC=""
	empty := func(name string) (string, bool) { return "", name == "GOGC" }
	require.Equal(t, defaultGCPercent, setDefaultGCPercent(empty))
	require.Equal(t, defaultGCPercent, gcPercent())

	// GOGC=off is a choice, and stands.
	debug.SetGCPercent(-1)
	off := func(name string) (string, bool) { return "off", name == "GOGC" }
	require.Equal(t, -1, setDefaultGCPercent(off))
	require.Equal(t, -1, gcPercent())
}
