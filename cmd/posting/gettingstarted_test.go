package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
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

// blockWith returns the one block holding every marker. A marker may
// start with a newline to match only at the start of a line (the block's
// first line included).
func blockWith(t *testing.T, blocks []string, markers ...string) string {
	t.Helper()
	var found []string
	for _, b := range blocks {
		all := true
		for _, m := range markers {
			all = all && strings.Contains("\n"+b, m)
		}
		if all {
			found = append(found, b)
		}
	}
	require.Len(t, found, 1, "blocks holding %q", markers)
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

// requireFreeTCP fails when anything accepts connections on addr (a port
// that is not HTTP, such as the embedded broker's).
func requireFreeTCP(t *testing.T, addr string) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
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

	setup := blockWith(t, blocks, "psql", "./bin/posting migrate")
	requireShown(t, setup, "migrations to postgres://", "export POSTING_DATABASE_MAX_CONNS=20")
	out := sh.run(unique.Replace(setup))
	require.Contains(t, out, "migrations to postgres://127.0.0.1:5432/"+name)
	require.Contains(t, sh.exports, amqpURL[:strings.Index(amqpURL, "@")], "the page's RabbitMQ URL is the test server's")

	sh.start(blockWith(t, blocks, "\nPOSTING_WORKER_HTTP_ADDR=127.0.0.1:8082 ./bin/posting worker &"))
	waitHealthy(t, "127.0.0.1:8082")
	sh.start(blockWith(t, blocks, "\nPOSTING_HTTP_ADDR=127.0.0.1:8090 ./bin/posting serve &"))
	waitHealthy(t, "127.0.0.1:8080")
	waitHealthy(t, "127.0.0.1:8090")
	// The page's pool, which its arithmetic fits into max_connections=100,
	// is the one in force in each of the three processes.
	poolMax := regexp.MustCompile(`(?m)^posting_database_connections_max(\{[^}]*\})? (\S+)$`)
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8090", "127.0.0.1:8082"} {
		code, body := httpGet(addr, "/metrics")
		require.Equal(t, http.StatusOK, code, "%s/metrics", addr)
		m := poolMax.FindStringSubmatch(body)
		require.NotNil(t, m, "%s/metrics has no posting_database_connections_max", addr)
		require.Equal(t, "20", m[2], "%s's pool", addr)
	}

	use := blockWith(t, blocks, `"content\":\"Two instances\"`)
	out = sh.run(use)
	require.Contains(t, out, `"id":1,`)
	require.Equal(t, 2, strings.Count(out, `"content":"Two instances"`), "created on one instance, read on the other:\n%s", out)
	sh.eventually("./bin/posting outbox stats\n", 30*time.Second, "SENT        1")
}

// The Kafka path on one machine: the first serve runs the embedded broker
// (and its embedded worker), the worker and the second serve point
// POSTING_KAFKA_BROKERS at it.
func TestGettingStartedMariaDBKafkaRunsAsPrinted(t *testing.T) {
	t.Parallel()
	myURL := databasetest.MySQLURL(t, "posting_docs") // a fresh database, dropped afterwards
	if _, err := exec.LookPath("mysql"); err != nil {
		if os.Getenv("POSTING_TEST_REQUIRE_MYSQL") == "1" {
			t.Fatalf("the page's mysql client is not installed and POSTING_TEST_REQUIRE_MYSQL=1: %v", err)
		}
		t.Skip("mysql client not installed: the page's MariaDB + Kafka blocks are not run")
	}
	name := myURL[strings.LastIndex(myURL, "/")+1:]
	if myURL != "mysql://root@127.0.0.1:3306/"+name {
		t.Skipf("the page's commands use root@127.0.0.1:3306, the test server is %s", myURL[:strings.LastIndex(myURL, "/")])
	}
	takeDocsPorts(t)
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8090", "127.0.0.1:8082"} {
		requireFreePort(t, addr)
	}
	requireFreeTCP(t, "127.0.0.1:9092")
	blocks := pageBlocks(t, "getting-started.md")
	sh := newDocShell(t)
	// The page's database made unique to this run: MySQLURL created one
	// already, so the page's CREATE DATABASE makes a second name that the
	// cleanup drops too.
	unique := strings.NewReplacer(
		"CREATE DATABASE posting ", "CREATE DATABASE "+name+"_page ",
		"3306/posting'", "3306/"+name+"'",
	)
	t.Cleanup(func() {
		_ = exec.Command("mysql", "-h", "127.0.0.1", "-u", "root", "-e", "DROP DATABASE IF EXISTS "+name+"_page").Run()
	})

	setup := blockWith(t, blocks, "mysql -h 127.0.0.1", "./bin/posting migrate")
	requireShown(t, setup, "migrations to mysql://", "unset POSTING_RABBITMQ_URL")
	out := sh.run(unique.Replace(setup))
	require.Contains(t, out, "migrations to mysql://127.0.0.1:3306/"+name)
	require.Contains(t, sh.exports, "3306/"+name+"'")

	// The worker first, as printed: it waits for the broker of the first
	// serve, which the next block starts.
	worker := sh.start(blockWith(t, blocks, "\nPOSTING_WORKER_HTTP_ADDR=127.0.0.1:8082 POSTING_KAFKA_BROKERS=127.0.0.1:9092 ./bin/posting worker &"))
	serves := sh.start(blockWith(t, blocks, "POSTING_DATA_DIR=./data-mariadb", "POSTING_HTTP_ADDR=127.0.0.1:8090 POSTING_KAFKA_BROKERS=127.0.0.1:9092 ./bin/posting serve &"))
	waitHealthy(t, "127.0.0.1:8080")
	waitHealthy(t, "127.0.0.1:8090")
	waitHealthy(t, "127.0.0.1:8082")
	logs := serves.String()
	require.Contains(t, logs, `msg="embedded kafka broker started"`, "the first serve runs the broker")
	require.Contains(t, logs, `msg="using kafka cluster"`, "the second serve uses the first one's broker")
	m := regexp.MustCompile(`msg="embedded kafka broker started".* partitions=(\d+)`).FindStringSubmatch(logs)
	require.NotNil(t, m, "the broker logs its partitions:\n%s", logs)
	partitions, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	// The worker joins the group beside the first serve's embedded worker
	// and takes its share of the partitions. Started first, it may hold
	// them all until the group rebalances with the serve's worker in it.
	assigned := regexp.MustCompile(`msg="partitions assigned".* partitions="\[([0-9 ]+)\]"`)
	var mine map[int32]bool
	require.Eventually(t, func() bool {
		all := assigned.FindAllStringSubmatch(worker.String(), -1)
		if len(all) == 0 {
			return false
		}
		mine = map[int32]bool{}
		for _, p := range strings.Fields(all[len(all)-1][1]) {
			n, _ := strconv.Atoi(p)
			mine[int32(n)] = true
		}
		return len(mine) < partitions
	}, 60*time.Second, 200*time.Millisecond, "the worker never shared the group's partitions with the first serve's worker:\n%s", worker)

	use := blockWith(t, blocks, `"content\":\"MariaDB and Kafka\"`)
	requireShown(t, use, "127.0.0.1:8090/api/v1/posts -H", "127.0.0.1:8080/api/v1/posts/1")
	out = sh.run(use)
	require.Contains(t, out, `"id":1,`)
	require.Equal(t, 2, strings.Count(out, `"content":"MariaDB and Kafka"`), "created on the second serve, read on the first:\n%s", out)

	published := blockWith(t, blocks, `# "status":"PUBLISHED"`, "outbox stats")
	requireShown(t, published, "SENT        2")
	sh.eventually(published, 90*time.Second, `"status":"PUBLISHED"`, "SENT        2")
	require.Regexp(t, `msg="post published".* post_id=1 `, serves.String()+worker.String(), "one of the two workers published it")

	// A post created through the second serve whose partition the worker
	// holds is published by the worker, not by the first serve.
	var id int
	for i := 0; id == 0; i++ {
		require.Less(t, i, 50, "no post landed on the worker's partitions %v", mine)
		post := postingtest.CreatePost(t, "127.0.0.1:8090", time.Now().Add(3*time.Second))
		n := int(post["id"].(float64))
		if mine[kafkatest.PartitionFor(strconv.Itoa(n), int32(partitions))] {
			id = n
		}
	}
	sh.eventually("curl -s http://127.0.0.1:8080/api/v1/posts/"+strconv.Itoa(id)+"\n", 60*time.Second, `"status":"PUBLISHED"`)
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`msg="post published".* post_id=` + strconv.Itoa(id) + ` `).MatchString(worker.String())
	}, 10*time.Second, 100*time.Millisecond, "post %d, on the worker's partitions %v, was not published by the worker:\n%s", id, mine, worker)
	require.NotRegexp(t, `msg="post published".* post_id=`+strconv.Itoa(id)+` `, serves.String(), "nor by the first serve")
	t.Logf("post %d, created on :8090, published by the worker (its partitions %v of %d)", id, mine, partitions)
}

// The page's prose reads in short sentences: a mean of at most 25 words,
// none over 60; no table cell over 400 characters; and nothing that ages
// with the machine it was written on. Headings, code blocks and table rows
// are not sentences.
func TestGettingStartedPageReadsShort(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "getting-started.md"))
	require.NoError(t, err)
	var prose []string
	inCode := false
	for _, line := range strings.Split(string(page), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			inCode = !inCode
		case inCode, strings.HasPrefix(trimmed, "#"):
		case strings.HasPrefix(trimmed, "|"):
			for _, cell := range strings.Split(strings.Trim(trimmed, "|"), " | ") {
				require.LessOrEqual(t, len(cell), 400, "table cell: %s", cell)
			}
		default:
			prose = append(prose, trimmed)
		}
	}
	text := strings.Join(prose, "\n")
	require.NotRegexp(t, `(?i)this machine|load average|\bload \d|\b20\d\d-\d\d-\d\d\b`, text, "a dated run or a machine's state")
	var words, sentences int
	for _, para := range strings.Split(text, "\n\n") {
		for _, s := range regexp.MustCompile(`[.!?](\s|$)`).Split(strings.TrimSpace(para), -1) {
			n := len(strings.Fields(s))
			if n == 0 {
				continue
			}
			require.LessOrEqual(t, n, 60, "a sentence over 60 words: %q", s)
			words += n
			sentences++
		}
	}
	require.NotZero(t, sentences)
	mean := float64(words) / float64(sentences)
	t.Logf("%d sentences, mean %.1f words", sentences, mean)
	require.LessOrEqual(t, mean, 25.0, "mean sentence length")
}
