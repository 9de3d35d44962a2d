package main

import "runtime/debug"

// defaultGCPercent is the garbage collector's target (GOGC) of every
// command when the environment sets none: the heap may grow to three times
// what is live between collections, rather than twice (Go's 100). At 100
// the collector took about a tenth of a whole serve's CPU under creates;
// with 200 `posting bench` measured about a tenth more posts/s through a
// whole serve and through the API alone, in runs alternating with 100.
const defaultGCPercent = 200

// setDefaultGCPercent sets the collector's target to defaultGCPercent
// unless GOGC is set (lookup is os.LookupEnv): an operator's GOGC, read by
// the runtime at start, stands. An empty GOGC counts as not set, as the
// runtime counts it (it then applies its own default, 100): a blank left
// by an env file or a template is no one's choice. It returns the target
// in force.
func setDefaultGCPercent(lookup func(string) (string, bool)) int {
	if v, set := lookup("GOGC"); set && v != "" {
		return gcPercent()
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

// gcPercent is the collector's target in force.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}
