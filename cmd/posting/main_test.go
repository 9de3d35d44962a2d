package main

import (
	"os"
	"testing"
)

// TestMain bounds the pool of every serve, worker and operator command the
// tests start (in-process, or as the built binary, which inherits the
// environment) unless a test sets its own: dozens of them run at once
// against the one shared PostgreSQL server, whose max_connections (100) the
// production default of 40 a process would exhaust. A test's own
// POSTING_DATABASE_MAX_CONNS in the child's environment still wins.
func TestMain(m *testing.M) {
	if os.Getenv("POSTING_DATABASE_MAX_CONNS") == "" {
		_ = os.Setenv("POSTING_DATABASE_MAX_CONNS", "8")
	}
	os.Exit(m.Run())
}
