package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
)

// TestMain bounds the database pool of every serve, worker and operator
// command the tests start, in-process or as the built binary
// (postingtest.BoundPool).
func TestMain(m *testing.M) { postingtest.Main(m) }

// runCLI runs the command line in process, as main does, and returns
// stdout, stderr and the exit status.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs(args)
	code := exitCode(root.ExecuteContext(context.Background()), &errOut)
	return out.String(), errOut.String(), code
}

// The binary's helpers, shared with the cross-component tests of e2e/.
var (
	buildBinary = postingtest.Binary
	runBinary   = postingtest.RunBinary
	startBinary = postingtest.StartBinary
	httpGet     = postingtest.HTTPGet
)

// runInProcess runs one command of the binary in this process until the
// test ends, and fails the test if it returns an error.
func runInProcess(t *testing.T, out io.Writer, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, args, out, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "posting %s", args[0])
		case <-time.After(60 * time.Second):
			t.Errorf("posting %s did not stop", args[0])
		}
	})
}

// sendRequest sends body as JSON, with token as its bearer token unless it
// is empty, and returns the answer for the caller to close.
func sendRequest(t *testing.T, method, url, token, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}
