package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
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

// refusal is arguments a command refuses (exit status 2) and what its
// refusal says.
type refusal struct {
	args []string
	says string
}

// flagErrors are refusals of bad flag values, each naming its flag.
func flagErrors(bads ...[]string) []refusal {
	out := make([]refusal, len(bads))
	for i, bad := range bads {
		out[i] = refusal{bad, bad[0]}
	}
	return out
}

// requireUsageErrors runs command with each refusal's arguments added and
// requires exit status 2 and stderr saying what the refusal says.
func requireUsageErrors(t *testing.T, command []string, refusals ...refusal) {
	t.Helper()
	for _, r := range refusals {
		_, errOut, code := runCLI(t, append(slices.Clone(command), r.args...)...)
		require.Equal(t, 2, code, "%v: %s", r.args, errOut)
		require.Contains(t, errOut, r.says)
	}
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
