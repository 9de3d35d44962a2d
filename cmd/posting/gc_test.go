package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// Not parallel: the collector's target is the test process's.
func TestCommandsRaiseTheGCTargetUnlessGOGCIsSet(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { setGCPercentForTest(before) })

	setGCPercentForTest(100)
	unset := func(string) (string, bool) { return "", false }
	require.Equal(t, defaultGCPercent, setDefaultGCPercent(unset))
	require.Equal(t, defaultGCPercent, gcPercent())

	// An operator's GOGC (here 50, as the runtime read it at start) stands.
	setGCPercentForTest(50)
	set := func(name string) (string, bool) { return "50", name == "GOGC" }
	require.Equal(t, 50, setDefaultGCPercent(set))
	require.Equal(t, 50, gcPercent())
}

func setGCPercentForTest(p int) { debug.SetGCPercent(p) }
