package kafkatest

import (
	"os"
	"os/exec"
	"testing"
)

// Kcat returns the path of the kcat command (librdkafka's client, one
// independent of the Go clients) and whether it is installed. Without it
// the test fails when POSTING_TEST_REQUIRE_KCAT=1; otherwise the caller
// skips what needs it.
func Kcat(t testing.TB) (path string, ok bool) {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_KCAT") == "1" {
			t.Fatalf("kcat not found and POSTING_TEST_REQUIRE_KCAT=1: %v", err)
		}
		return "", false
	}
	return path, true
}
