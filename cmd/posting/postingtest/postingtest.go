// Package postingtest runs the posting binary for tests: built once per test
// binary, started on free loopback ports with its settings in the
// environment, and driven over its HTTP API. The command's own tests
// (cmd/posting) and the cross-component tests (e2e/) share it.
package postingtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/freeport"
	"github.com/postingsvc/posting/internal/platform/logtest"
)

// BoundPool bounds the pool of every serve, worker and operator command the
// tests start (in-process, or as the built binary, which inherits the
// environment) unless the environment sets its own: dozens of them run at
// once against the one shared PostgreSQL server, whose max_connections
// (100) the production default of 40 a process would exhaust. A test's own
// POSTING_DATABASE_MAX_CONNS in the child's environment still wins. Main
// calls it.
func BoundPool() {
	if os.Getenv("POSTING_DATABASE_MAX_CONNS") == "" {
		_ = os.Setenv("POSTING_DATABASE_MAX_CONNS", "8")
	}
}

// Main is a TestMain that bounds the pool (BoundPool), then runs the tests.
func Main(m *testing.M) {
	BoundPool()
	os.Exit(m.Run())
}

// Binary builds cmd/posting once per test binary run and returns its path.
var Binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "posting-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "posting")
	out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "github.com/postingsvc/posting/cmd/posting").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// FreeAddr is a loopback address with a port nothing listens on now, and
// one it has not returned before in this process (see freeport: the port
// is not asked of the kernel, which may give it to the next listener or
// connection of any process before the child binds it).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	require.NoError(t, err)
	return addr
}

// Proc is a running posting binary.
type Proc struct {
	// Cmd is the process.
	Cmd *exec.Cmd
	// Out holds its stdout and stderr.
	Out *logtest.Buffer
	// Done receives Cmd.Wait's error once it exits.
	Done chan error
	// HTTP is the address its /readyz answered on ("" if none was awaited).
	HTTP string
}

// Start starts the built binary with args and env added to the test's
// environment, without waiting for anything; its output goes to Out and to
// also, if not nil. It is killed when the test ends, and its output is
// logged if the test failed.
func Start(t testing.TB, also io.Writer, env []string, args ...string) *Proc {
	t.Helper()
	bin, err := Binary()
	require.NoError(t, err)
	p := &Proc{Out: &logtest.Buffer{}, Done: make(chan error, 1)}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	var out io.Writer = p.Out
	if also != nil {
		out = io.MultiWriter(p.Out, also)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = out, out
	require.NoError(t, p.Cmd.Start())
	go func() { p.Done <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		if p.Cmd.ProcessState == nil {
			_ = p.Cmd.Process.Kill()
			<-p.Done
		}
		if t.Failed() {
			t.Logf("posting %s output:\n%s", strings.Join(args, " "), p.Out.String())
		}
	})
	return p
}

// StartBinary is Start, then waits until http://readyAddr/readyz answers
// 200.
func StartBinary(t testing.TB, readyAddr string, env []string, args ...string) *Proc {
	t.Helper()
	p := Start(t, nil, env, args...)
	p.HTTP = readyAddr
	require.Eventually(t, func() bool {
		code, _ := HTTPGet(readyAddr, "/readyz")
		return code == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "posting %s never became ready", args[0])
	return p
}

// StartServe starts `posting serve` with env, which must set
// POSTING_HTTP_ADDR, and waits until it is ready.
func StartServe(t testing.TB, env ...string) *Proc {
	t.Helper()
	addr := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "POSTING_HTTP_ADDR="); ok {
			addr = v
		}
	}
	return StartBinary(t, addr, env, "serve")
}

// StartFreshServe starts `posting serve` on a free HTTP address with a data
// dir of its own, then env, and waits until it is ready.
func StartFreshServe(t testing.TB, env ...string) *Proc {
	t.Helper()
	return StartServe(t, append([]string{"POSTING_HTTP_ADDR=" + FreeAddr(t), "POSTING_DATA_DIR=" + t.TempDir()}, env...)...)
}

// StartFreshWorker starts `posting worker` with its HTTP endpoints on a free
// address and a data dir of its own, then env, and waits until its /readyz
// answers 200.
func StartFreshWorker(t testing.TB, env ...string) *Proc {
	t.Helper()
	addr := FreeAddr(t)
	return StartBinary(t, addr, append([]string{"POSTING_WORKER_HTTP_ADDR=" + addr, "POSTING_DATA_DIR=" + t.TempDir()}, env...), "worker")
}

// RunBinary runs the built binary to its end and returns its combined
// output and exit status.
func RunBinary(t testing.TB, env []string, args ...string) (string, int) {
	t.Helper()
	bin, err := Binary()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "posting %s did not exit: %s", strings.Join(args, " "), out)
	return string(out), cmd.ProcessState.ExitCode()
}

// Terminate sends SIGTERM and requires exit status 0 within 60 s.
func (p *Proc) Terminate(t testing.TB) {
	t.Helper()
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.Done:
		require.NoError(t, err, "exit status after SIGTERM")
		require.Equal(t, 0, p.Cmd.ProcessState.ExitCode())
	case <-time.After(60 * time.Second):
		t.Fatal("posting did not exit within 60s of SIGTERM")
	}
}

// HTTPGet returns the status and body of GET http://addr+path, or 0 when
// nothing answers.
func HTTPGet(addr, path string) (int, string) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// CreatePost creates a post due at scheduledAt through the API at addr,
// requires 201 and returns the answer's JSON.
func CreatePost(t testing.TB, addr string, scheduledAt time.Time) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"title":"hello","content":"world","scheduledAt":%q}`, scheduledAt.UTC().Format(time.RFC3339))
	resp, err := http.Post("http://"+addr+"/api/v1/posts", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(raw))
	var post map[string]any
	require.NoError(t, json.Unmarshal(raw, &post))
	return post
}

// WaitUnready polls GET /readyz until it answers 503 and returns the body.
func WaitUnready(t testing.TB, addr string) string {
	t.Helper()
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = HTTPGet(addr, "/readyz")
		return code == http.StatusServiceUnavailable
	}, 60*time.Second, 100*time.Millisecond, "/readyz never answered 503")
	return body
}
