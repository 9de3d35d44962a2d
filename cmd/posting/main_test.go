package main

import (
	"os"
	"testing"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
)

// TestMain bounds the database pool of every serve, worker and operator
// command the tests start, in-process or as the built binary
// (postingtest.BoundPool).
func TestMain(m *testing.M) {
	postingtest.BoundPool()
	os.Exit(m.Run())
}
