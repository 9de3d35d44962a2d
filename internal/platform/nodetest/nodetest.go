// Package nodetest runs the third-party JavaScript tools and clients pinned in
// the repository's package.json (installed with npm ci) from Go tests, so that
// what the service serves and sends is read by code nobody here wrote.
package nodetest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Root is the repository root: the folder holding package.json and
// node_modules. Tests run in their package's folder, so it is found upwards.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "package.json")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no package.json beside go.mod above the test's folder")
		}
		dir = parent
	}
}

// Require returns the path of node and the repository root, after checking
// that npm ci has installed the pinned packages. Without them the test is
// skipped with a message, unless POSTING_TEST_REQUIRE_NODE=1 (as in CI), which
// fails it instead.
func Require(t testing.TB) (node, root string) {
	t.Helper()
	root = Root(t)
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(root, "node_modules", ".package-lock.json"))
	}
	if err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_NODE") == "1" {
			t.Fatalf("node or the pinned npm packages are missing and POSTING_TEST_REQUIRE_NODE=1 (run npm ci in %s): %v", root, err)
		}
		t.Skipf("node or the pinned npm packages are missing (run npm ci in %s); set POSTING_TEST_REQUIRE_NODE=1 to fail instead: %v", root, err)
	}
	return node, root
}

// Result is what a finished node process printed.
type Result struct {
	Stdout, Stderr string
	ExitCode       int
}

// Run runs node with args (a script path relative to the repository root,
// then its arguments) in the repository root, with extra environment
// variables env ("NAME=value"), bounded by timeout. It fails the test if node
// cannot be started or outlives the bound; a non-zero exit is returned for the
// test to judge.
func Run(t testing.TB, timeout time.Duration, env []string, args ...string) Result {
	t.Helper()
	node, root := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_UPDATE_NOTIFIER=1")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("node %v did not finish within %s\nstdout:\n%s\nstderr:\n%s", args, timeout, stdout.String(), stderr.String())
	}
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("node %v: %v", args, err)
		}
		res.ExitCode = ee.ExitCode()
	}
	return res
}
