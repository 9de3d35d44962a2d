package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/logtest"
)

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

// runBinary runs the built binary to its end and returns its combined output
// and exit status.
func runBinary(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "posting %s did not exit: %s", strings.Join(args, " "), out)
	return string(out), cmd.ProcessState.ExitCode()
}

// startBinary starts the built binary with args and waits until
// http://readyAddr/readyz answers 200; it is killed when the test ends.
func startBinary(t *testing.T, readyAddr string, env []string, args ...string) *proc {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	p := &proc{out: &logtest.Buffer{}, done: make(chan error, 1), http: readyAddr}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("posting %s output:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	require.Eventually(t, func() bool {
		code, _ := httpGet(readyAddr, "/readyz")
		return code == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "posting %s never became ready", args[0])
	return p
}

// httpGet returns the status and body of GET http://addr+path, or 0 when
// nothing answers.
func httpGet(addr, path string) (int, string) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
