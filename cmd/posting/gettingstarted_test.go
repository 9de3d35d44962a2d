package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/rabbitmq/rabbitmqtest"
)

// The getting-started page's command blocks, run as printed by bash in a
// folder holding ./bin/posting, on the ports the page names: a page whose
// commands stop working fails here. The page's comment lines are what the
// checks look for. Only the database name and the RabbitMQ objects are made
// unique to the run (and removed afterwards).

// pageBlocks returns the ```sh blocks of docs/<name>, in page order.
func pageBlocks(t *testing.T, name string) []string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	require.NoError(t, err)
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(page), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// blockWith returns the one block holding marker.
func blockWith(t *testing.T, blocks []string, marker string) string {
	t.Helper()
	var found []string
	for _, b := range blocks {
		if strings.Contains(b, marker) {
			found = append(found, b)
		}
	}
	require.Len(t, found, 1, "blocks holding %q", marker)
	return found[0]
}

// docShell runs blocks in a folder with ./bin/posting, as a reader of the
// page does from the repository root.
type docShell struct {
	t       *testing.T
	dir     string
	exports string // export lines of the blocks run so far
}

func newDocShell(t *testing.T) *docShell {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.Symlink(bin, filepath.Join(dir, "bin", "posting")))
	return &docShell{t: t, dir: dir}
}

func (s *docShell) command(ctx context.Context, block string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", s.exports+block)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs block to its end and returns its output; its export lines stay
// for the next blocks.
func (s *docShell) run(block string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := s.command(ctx, block).CombinedOutput()
	require.NoError(s.t, err, "block:\n%s\noutput:\n%s", block, out)
	for _, line := range strings.Split(block, "\n") {
		if strings.HasPrefix(line, "export ") {
			s.exports += line + "\n"
		}
	}
	return string(out)
}

// start runs block in the background (a server, or lines ending in &) and
// kills its whole process group when the test ends.
func (s *docShell) start(block string) *logtest.Buffer {
	s.t.Helper()
	out := &logtest.Buffer{}
	cmd := s.command(context.Background(), block)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(s.t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if s.t.Failed() {
			s.t.Logf("background block:\n%s\noutput:\n%s", block, out.String())
		}
	})
	return out
}

// eventually reruns block until its output holds every want.
func (s *docShell) eventually(block string, timeout time.Duration, want ...string) string {
	s.t.Helper()
	var out string
	require.Eventually(s.t, func() bool {
		out = s.run(block)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	}, timeout, 500*time.Millisecond, "block:\n%s\nwanted %q; last output:\n%s", block, want, &out)
	return out
}

func requireFreePort(t *testing.T, addr string) {
	t.Helper()
	if code, _ := httpGet(addr, "/healthz"); code != 0 {
		t.Fatalf("%s is taken by another process; the page's commands need it", addr)
	}
}

func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, _ := httpGet(addr, "/readyz")
		return code == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "%s never became ready", addr)
}

// requireShown fails unless the page shows each of want in block, so the
// checks below follow what the page promises.
func requireShown(t *testing.T, block string, want ...string) {
	t.Helper()
	for _, w := range want {
		require.Contains(t, block, w, "the page shows this output")
	}
}

// docsPorts serializes the tests that take the page's fixed ports.
var docsPorts = make(chan struct{}, 1)

func takeDocsPorts(t *testing.T) {
	docsPorts <- struct{}{}
	t.Cleanup(func() { <-docsPorts })
}

func TestGettingStartedEmbeddedRunsAsPrinted(t *testing.T) {
	t.Parallel()
	takeDocsPorts(t)
	blocks := pageBlocks(t, "getting-started.md")
	sh := newDocShell(t)
	requireFreePort(t, "127.0.0.1:8080")

	sh.start(blockWith(t, blocks, "POSTING_SCHEDULER_SPEC='@every 5s' ./bin/posting serve"))
	waitHealthy(t, "127.0.0.1:8080")

	create := blockWith(t, blocks, `"content\":\"First post\"`)
	requireShown(t, create, "HTTP/1.1 201 Created", "Location: /api/v1/posts/1", `"status":"RESERVED"`)
	out := sh.run(create)
	require.Contains(t, out, "HTTP/1.1 201 Created")
	require.Contains(t, out, "Location: /api/v1/posts/1")
	require.Contains(t, out, `"status":"RESERVED"`)

	working := blockWith(t, blocks, `# "status":"WORKING"`)
	sh.eventually(working, 30*time.Second, `"status":"WORKING"`)

	kcat := blockWith(t, blocks, "kcat -b 127.0.0.1:9092")
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_KCAT") == "1" {
			t.Fatalf("kcat not found and POSTING_TEST_REQUIRE_KCAT=1: %v", err)
		}
		t.Log("kcat not installed: the page's kcat block is not run")
		return
	}
	requireShown(t, kcat, "key=1", "event-type=POSTING_EVENT", "event-type=POSTING_RESERVATION_EVENT", `"action":"CREATED"`)
	sh.eventually(kcat, 30*time.Second, "key=1", "event-type=POSTING_EVENT", "event-type=POSTING_RESERVATION_EVENT", `"action":"CREATED"`)
	// The last block (PUBLISHED) needs the post's time, three minutes on:
	// the worker's publishing is proven by the end-to-end tests.
}

func TestGettingStartedProductionRunsAsPrinted(t *testing.T) {
	t.Parallel()
	pgURL := databasetest.PostgresURL(t, "posting_docs") // a fresh database, dropped afterwards
	amqpURL := rabbitmqtest.URL(t)
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql not installed")
	}
	takeDocsPorts(t)
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8090", "127.0.0.1:8082"} {
		requireFreePort(t, addr)
	}
	name := pgURL[strings.LastIndex(pgURL, "/")+1:]
	name = name[:strings.IndexAny(name+"?", "?")]
	blocks := pageBlocks(t, "getting-started.md")
	sh := newDocShell(t)
	// The page's objects, made unique to this run: the database (created by
	// PostgresURL already, so the page's CREATE DATABASE makes a second
	// name that the cleanup drops too) and the worker's queues.
	exchange, group := rabbitmqtest.Name("posting-events"), rabbitmqtest.Name("posting-worker")
	rabbitmqtest.DeleteAfter(t, amqpURL, exchange, group, group+".dead")
	unique := strings.NewReplacer(
		"CREATE DATABASE posting'", "CREATE DATABASE "+name+"_page'",
		"5432/posting?", "5432/"+name+"?",
	)
	t.Cleanup(func() {
		_ = exec.Command("psql", "-h", "127.0.0.1", "-U", "postgres", "-c", "DROP DATABASE IF EXISTS "+name+"_page").Run()
	})
	sh.exports = "export POSTING_RABBITMQ_EXCHANGE=" + exchange + " POSTING_WORKER_GROUP=" + group + "\n"

	setup := blockWith(t, blocks, "./bin/posting migrate")
	requireShown(t, setup, "migrations to postgres://")
	out := sh.run(unique.Replace(setup))
	require.Contains(t, out, "migrations to postgres://127.0.0.1:5432/"+name)
	require.Contains(t, sh.exports, amqpURL[:strings.Index(amqpURL, "@")], "the page's RabbitMQ URL is the test server's")

	sh.start(blockWith(t, blocks, "./bin/posting worker &"))
	waitHealthy(t, "127.0.0.1:8082")
	sh.start(blockWith(t, blocks, "POSTING_HTTP_ADDR=127.0.0.1:8090 ./bin/posting serve &"))
	waitHealthy(t, "127.0.0.1:8080")
	waitHealthy(t, "127.0.0.1:8090")

	use := blockWith(t, blocks, `"content\":\"Two instances\"`)
	out = sh.run(use)
	require.Contains(t, out, `"id":1,`)
	require.Equal(t, 2, strings.Count(out, `"content":"Two instances"`), "created on one instance, read on the other:\n%s", out)
	sh.eventually("./bin/posting outbox stats\n", 30*time.Second, "SENT        1")
}
