package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// raceRounds is how many times each dialect starts the four processes
// together on a fresh database.
const raceRounds = 10

// Two `posting migrate` and a `posting serve` + `posting worker` pair started
// together on a fresh database all succeed: the migrations run under a lock
// (GET_LOCK on MySQL, pg_advisory_lock on PostgreSQL, a file lock on SQLite) and opening SQLite waits out a
// busy file instead of failing. Without the lock two migrators create the
// same tables and one fails.
func TestStartTogetherOnFreshDatabase(t *testing.T) {
	t.Parallel()
	bin, err := buildBinary()
	require.NoError(t, err)
	for _, dialect := range []string{"mysql", "postgres", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			for round := 1; round <= raceRounds; round++ {
				ok := t.Run(fmt.Sprintf("round%02d", round), func(t *testing.T) {
					dataDir := t.TempDir()
					// SQLite: no URL, so all four share the embedded default
					// file under the data dir, as `serve` and `worker` started
					// in one folder do.
					var url string
					if dialect != "sqlite" {
						url = databasetest.URL(t, database.Dialect(dialect), "race")
					}
					startTogether(t, bin, dataDir, url)
					if dialect == "sqlite" {
						_, err := os.Stat(filepath.Join(dataDir, "posting.db"))
						require.NoError(t, err, "the embedded database was created")
					}
				})
				if !ok {
					return // one failed round says it; the rest would repeat it
				}
			}
		})
	}
}

// startTogether starts the four processes at once and requires every one of
// them to succeed: the migrators exit 0, serve and worker become ready and
// exit 0 on SIGTERM.
func startTogether(t *testing.T, bin, dataDir, url string) {
	t.Helper()
	kafkaAddr := freeAddr(t)
	httpAddr := freeAddr(t)
	workerAddr := freeAddr(t)
	common := []string{
		"POSTING_DATA_DIR=" + dataDir,
		"POSTING_DATABASE_URL=" + url,
		"POSTING_EMBEDDED_KAFKA_ADDR=" + kafkaAddr,
		"POSTING_SHUTDOWN_TIMEOUT=20s",
	}
	start := func(name string, env ...string) *proc {
		p := &proc{Out: &logtest.Buffer{}, Done: make(chan error, 1)}
		p.Cmd = exec.Command(bin, name)
		p.Cmd.Env = append(append(os.Environ(), common...), env...)
		p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
		require.NoError(t, p.Cmd.Start())
		exited := make(chan struct{})
		go func() { err := p.Cmd.Wait(); close(exited); p.Done <- err }()
		t.Cleanup(func() {
			select {
			case <-exited:
			default:
				_ = p.Cmd.Process.Kill()
				<-exited
			}
			if t.Failed() {
				t.Logf("posting %s output:\n%s", name, p.Out.String())
			}
		})
		return p
	}
	procs := map[string]*proc{
		"migrate 1": start("migrate"),
		"migrate 2": start("migrate"),
		"serve": start("serve", "POSTING_HTTP_ADDR="+httpAddr, "POSTING_INSTANCE_ID=race-serve",
			"POSTING_RELAY_INTERVAL=200ms"),
		// The worker finds serve's embedded broker at
		// POSTING_EMBEDDED_KAFKA_ADDR, as in the embedded quick start: with
		// POSTING_KAFKA_BROKERS and no database URL it would be refused.
		"worker": start("worker", "POSTING_WORKER_HTTP_ADDR="+workerAddr, "POSTING_INSTANCE_ID=race-worker"),
	}
	for _, name := range []string{"migrate 1", "migrate 2"} {
		p := procs[name]
		select {
		case err := <-p.Done:
			require.NoError(t, err, "%s: %s", name, p.Out.String())
			require.Regexp(t, `applied [0-9]+ migrations`, p.Out.String(), name)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not exit within 60s", name)
		}
	}
	for name, addr := range map[string]string{"serve": httpAddr, "worker": workerAddr} {
		p := procs[name]
		require.Eventually(t, func() bool {
			select {
			case err := <-p.Done:
				p.Done <- err // keep it for the check below
				return true
			default:
			}
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 60*time.Second, 50*time.Millisecond, "%s never became ready", name)
		select {
		case err := <-p.Done:
			t.Fatalf("%s exited before it was ready (%v)", name, err)
		default:
		}
	}
	// The worker first: it reads serve's embedded broker.
	for _, name := range []string{"worker", "serve"} {
		p := procs[name]
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-p.Done:
			require.NoError(t, err, "%s exit status after SIGTERM", name)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not exit within 60s of SIGTERM", name)
		}
	}
}
