// Package pgbouncertest starts pgbouncer in front of the test PostgreSQL
// server, so tests can run the service through a pooler as production does.
package pgbouncertest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/postingsvc/posting/internal/platform/freeport"
)

// Mode is a pgbouncer pool_mode.
type Mode string

// The pool modes tests use.
const (
	Transaction Mode = "transaction"
	Session     Mode = "session"
)

// PoolSize is each database's server pool: small, as the test server's
// max_connections is shared.
const PoolSize = 8

// Start starts pgbouncer in mode on a free loopback port in front of the
// server of serverURL (a postgres:// URL of the test server, such as
// databasetest.PostgresURL's), with trust authentication for serverURL's
// user and PoolSize server connections per database, and returns serverURL
// rewritten to go through it. pgbouncer is stopped when the test ends.
func Start(t testing.TB, serverURL string, mode Mode) string {
	t.Helper()
	return StartWithPoolSize(t, serverURL, mode, PoolSize)
}

// StartWithPoolSize is Start with poolSize server connections per
// database. With one, every statement through the pooler runs on the same
// server session, so a test can look at what a client left on it.
func StartWithPoolSize(t testing.TB, serverURL string, mode Mode, poolSize int) string {
	t.Helper()
	return StartServer(t, serverURL, mode, poolSize).URL
}

// Server is a running pgbouncer.
type Server struct {
	// URL is the server URL given to StartServer rewritten to go through
	// pgbouncer.
	URL string

	bin, dir, ini string
	addr          string
	cred          *syscall.Credential
	cmd           *exec.Cmd
	exited        chan error
	out           bytes.Buffer
}

// StartServer is StartWithPoolSize returning the running pgbouncer, which a
// test may kill and start again (Restart).
func StartServer(t testing.TB, serverURL string, mode Mode, poolSize int) *Server {
	t.Helper()
	bin := binary(t)
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgbouncer: server URL %q: %v", serverURL, err)
	}
	dir, cred := workDir(t)
	port := freePort(t)
	userName := u.User.Username()
	host, serverPort := u.Hostname(), u.Port()
	if serverPort == "" {
		serverPort = "5432"
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 200
server_check_delay = 0
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, host, serverPort, port, filepath.Join(dir, "userlist.txt"), mode, poolSize,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	s := &Server{bin: bin, dir: dir, ini: filepath.Join(dir, "pgbouncer.ini"), cred: cred,
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	write(t, s.ini, ini, cred)
	write(t, filepath.Join(dir, "userlist.txt"), fmt.Sprintf("%q \"\"\n", userName), cred)
	t.Cleanup(s.kill)
	s.start(t)
	u.Host = s.addr
	s.URL = u.String()
	return s
}

// Restart kills pgbouncer with SIGKILL, as a crash would, dropping every
// client and server connection, and starts it again on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	// The pidfile of the killed process would stop the new one.
	_ = os.Remove(filepath.Join(s.dir, "pgbouncer.pid"))
	s.start(t)
}

// Stop kills pgbouncer with SIGKILL and leaves it down (Restart starts
// it again): the database is unreachable through it.
func (s *Server) Stop() { s.kill() }

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.out.Reset()
	cmd := exec.Command(s.bin, s.ini)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, &s.out, &s.out
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.cmd, s.exited = cmd, exited
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(filepath.Join(s.dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited (%v): %s%s", err, s.out.String(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer not listening on %s after 10s", s.addr)
		}
	}
}

// binary is pgbouncer's path, or skips (fails under
// POSTING_TEST_REQUIRE_PGBOUNCER=1) the test when it is not installed.
func binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	if os.Getenv("POSTING_TEST_REQUIRE_PGBOUNCER") == "1" {
		t.Fatal("pgbouncer required (POSTING_TEST_REQUIRE_PGBOUNCER=1) but not installed: apt-get install pgbouncer")
	}
	t.Skip("skipping: pgbouncer not installed (apt-get install pgbouncer), or POSTING_TEST_REQUIRE_PGBOUNCER=1 to fail instead")
	return ""
}

// workDir is a directory for pgbouncer's files, removed when the test
// ends, and under root the credential to run pgbouncer with (the postgres
// user's, owning the directory); nil otherwise.
func workDir(t testing.TB) (string, *syscall.Credential) {
	t.Helper()
	// Not t.TempDir: its parents are 0700, closed to another user.
	dir, err := os.MkdirTemp("", "pgbouncertest-")
	if err != nil {
		t.Fatalf("pgbouncer dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() != 0 {
		return dir, nil
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("pgbouncer does not run as root, and there is no postgres user to run it as: %v", err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("pgbouncer dir: %v", err)
	}
	return dir, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func write(t testing.TB, path, content string, cred *syscall.Credential) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	if cred != nil {
		if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
	}
}

// freePort is a loopback port nobody listens on now (see freeport).
func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return port
}
