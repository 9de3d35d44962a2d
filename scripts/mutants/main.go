// Command mutants breaks critical lines of the service one at a time, in a
// temporary copy of the tree, and runs the tests of the package that owns
// each line: a mutation the tests do not notice is a promise no test keeps.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// mutation replaces one exact string of one file.
type mutation struct {
	// name is short and unique; -run picks mutations by substring of it.
	name string
	// file is relative to the module root.
	file string
	// pkg is the package whose tests must kill the mutant.
	pkg string
	// old must occur exactly once in file; new replaces it.
	old, new string
	// equivalent, when set, says why the mutant cannot be told apart by a
	// test: it is expected to survive, and does not fail the run.
	equivalent string
	// why says what the tests must notice.
	why string
}

// mutations is the table. The lead is changing internal/send/outbox/store.go and
// internal/send/relay/relay.go: when a pattern is no longer found, copy the current line
// into old and the broken form into new.
var mutations = []mutation{
	{
		name: "outbox-fence-version",
		file: "internal/send/outbox/store.go",
		pkg:  "./internal/send/outbox/",
		why:  "late MarkSent/Release of a recovered claim must be refused while another relay holds the row",
		old: `			Where("status = ?", StatusProcessing).
			Where(s.versionMatch(chunk)).`,
		new: `			Where("status = ?", StatusProcessing).
` + idsOnly("\t\t\t", "chunk"),
	},
	{
		name: "outbox-markfailed-version",
		file: "internal/send/outbox/store.go",
		pkg:  "./internal/send/outbox/",
		why:  "a late MarkFailed of a recovered claim must be refused while another relay holds the row",
		old:  `Where("id = ? AND version = ? AND status = ?", f.Message.ID, f.Message.Version, StatusProcessing)`,
		new:  `Where("id = ? AND version >= ? AND status = ?", f.Message.ID, f.Message.Version, StatusProcessing)`,
	},
	{
		name: "outbox-claim-version",
		file: "internal/send/outbox/store.go",
		pkg:  "./internal/send/outbox/",
		why:  "the claim UPDATE takes only the versions its locking read saw",
		equivalent: "between the locking read and the UPDATE no other transaction can change the rows " +
			"(FOR UPDATE SKIP LOCKED on MySQL, BEGIN IMMEDIATE on SQLite), so their versions are the ones read",
		old: `		Where("status IN ?", []Status{StatusPending, StatusRetry}).
		Where(s.versionMatch(rows)).`,
		new: `		Where("status IN ?", []Status{StatusPending, StatusRetry}).
` + idsOnly("\t\t", "rows"),
	},
	{
		name: "kafka-unavailable-unknown-topic",
		file: "internal/brokers/kafka/classify.go",
		pkg:  "./internal/brokers/kafka/",
		why:  "UNKNOWN_TOPIC_OR_PARTITION is an outage, not a rejection: it must not spend an attempt",
		old:  "\tsarama.ErrUnknownTopicOrPartition:         true,\n",
		new:  "",
	},
	{
		name: "kafka-unavailable-broker-not-available",
		file: "internal/brokers/kafka/classify.go",
		pkg:  "./internal/brokers/kafka/",
		why:  "BROKER_NOT_AVAILABLE is an outage, not a rejection: it must not spend an attempt",
		old:  "\tsarama.ErrBrokerNotAvailable:              true,\n",
		new:  "",
	},
	{
		name: "kafka-unavailable-throttling",
		file: "internal/brokers/kafka/classify.go",
		pkg:  "./internal/brokers/kafka/",
		why:  "the last of the 24 unavailable codes; any one dropped must be noticed",
		old:  "\tsarama.ErrThrottlingQuotaExceeded:         true,\n",
		new:  "",
	},
	{
		name: "kafka-rejoin-no-growth",
		file: "internal/brokers/kafka/consumer.go",
		pkg:  "./internal/brokers/kafka/",
		why:  "failed joins must wait longer and longer, not retry several times a second",
		old:  "b := &backoff.Backoff{Base: c.cfg.RejoinBase, Max: c.cfg.RejoinMax}",
		new:  "b := &backoff.Backoff{Base: c.cfg.RejoinBase, Max: c.cfg.RejoinBase}",
	},
	{
		name: "kafka-rejoin-no-reset",
		file: "internal/brokers/kafka/consumer.go",
		pkg:  "./internal/brokers/kafka/",
		why:  "after a session the next outage starts again from the base pause",
		old:  "\t\t\tb.Reset() // a session was set up: the cluster answered\n",
		new:  "",
	},
	{
		name: "kafka-consumer-error-flood",
		file: "internal/brokers/kafka/consumer.go",
		pkg:  "./internal/brokers/kafka/",
		why:  "a broker lost mid-session makes every partition report every retry: at most one warning a second",
		old:  "if time.Since(warned) < consumerErrorWarnEvery {",
		new:  "if false && time.Since(warned) < consumerErrorWarnEvery {",
	},
	{
		name: "relay-stop-no-wait",
		file: "internal/platform/startstop/startstop.go",
		pkg:  "./internal/send/relay/",
		why:  "Stop returns only after the poll in flight is recorded and the loop has exited",
		old: `	cancel(ErrStop)
	<-done
}`,
		new: `	cancel(ErrStop)
	_ = done
}`,
	},
	{
		name: "worker-no-rearm-on-redelivery",
		file: "internal/publish/worker/handle.go",
		pkg:  "./internal/publish/worker/",
		why:  "a redelivered reservation re-arms its timer, as the README promises",
		old:  "\tif after != nil {\n\t\tafter()\n\t}",
		new:  "\tif after != nil && !dup {\n\t\tafter()\n\t}",
	},
	{
		name: "scheduler-mark-without-status",
		file: "internal/write/reservation/scheduler.go",
		pkg:  "./internal/write/reservation/",
		why:  "the scheduler marks a post WORKING only while it is still RESERVED",
		old: `WHERE id = ? AND version = ? AND status = ?",
		StatusWorking, now, p.ID, p.Version.Int64, StatusReserved)`,
		new: `WHERE id = ? AND version = ?",
		StatusWorking, now, p.ID, p.Version.Int64)`,
	},
}

func main() {
	os.Exit(run())
}

func run() int {
	list := flag.Bool("list", false, "print the mutations and exit")
	only := flag.String("run", "", "comma-separated substrings: only mutations whose name contains one")
	baseline := flag.Bool("baseline", true, "first run the packages' tests unmutated (a failing baseline makes every mutant look killed)")
	timeout := flag.Duration("timeout", 15*time.Minute, "go test -timeout per package run")
	flag.Parse()

	var picked []mutation
	for _, m := range mutations {
		if matches(m.name, *only) {
			picked = append(picked, m)
		}
	}
	if *list {
		for _, m := range picked {
			kind := "must be killed"
			if m.equivalent != "" {
				kind = "equivalent, expected to survive"
			}
			fmt.Printf("%-40s %-26s %s: %s\n", m.name, m.file, kind, m.why)
		}
		return 0
	}
	if len(picked) == 0 {
		fmt.Fprintf(os.Stderr, "mutants: no mutation matches -run %q\n", *only)
		return 2
	}

	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	// Every pattern is checked before anything runs, so a stale table fails
	// at once instead of after an hour of tests.
	bad := false
	for _, m := range picked {
		if _, err := apply(root, m); err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s: %v\n", m.name, err)
			bad = true
		}
	}
	if bad {
		fmt.Fprintln(os.Stderr, "mutants: the code changed; update the table in scripts/mutants/main.go")
		return 2
	}

	tmp, err := os.MkdirTemp("", "posting-mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(root, tmp); err != nil {
		fmt.Fprintln(os.Stderr, "mutants: copy the tree:", err)
		return 2
	}
	env := os.Environ()
	if addr := mysqlAddr(); reachable(addr) {
		env = append(env, "POSTING_TEST_REQUIRE_MYSQL=1")
		fmt.Printf("mutants: MySQL at %s: its test variants count\n", addr)
	} else {
		fmt.Printf("mutants: no MySQL at %s: only the SQLite variants run\n", addr)
	}
	fmt.Printf("mutants: working copy %s\n", tmp)

	if *baseline {
		seen := map[string]bool{}
		for _, m := range picked {
			if seen[m.pkg] {
				continue
			}
			seen[m.pkg] = true
			start := time.Now()
			out, err := goTest(tmp, env, m.pkg, *timeout)
			if err != nil {
				fmt.Printf("BASELINE FAILS  %s (%s)\n%s\n", m.pkg, time.Since(start).Round(time.Second), tail(out, 40))
				fmt.Println("mutants: the unmutated tests fail; fix them first")
				return 2
			}
			fmt.Printf("baseline ok     %s (%s)\n", m.pkg, time.Since(start).Round(time.Second))
		}
	}

	survived, broken := 0, 0
	for _, m := range picked {
		path := filepath.Join(tmp, m.file)
		orig, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutants:", err)
			return 2
		}
		mutated, err := apply(tmp, m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s: %v\n", m.name, err)
			return 2
		}
		if err := os.WriteFile(path, mutated, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mutants:", err)
			return 2
		}
		start := time.Now()
		verdict, detail := judge(tmp, env, m, *timeout)
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mutants: restore:", err)
			return 2
		}
		took := time.Since(start).Round(time.Second)
		switch verdict {
		case "KILLED":
			note := ""
			if m.equivalent != "" {
				note = " (listed as equivalent: a test now tells it apart; drop the equivalent note)"
			}
			fmt.Printf("KILLED          %-40s %s %s%s\n", m.name, took, detail, note)
		case "SURVIVED":
			if m.equivalent != "" {
				fmt.Printf("SURVIVED (equivalent) %-34s %s: %s\n", m.name, took, m.equivalent)
				continue
			}
			survived++
			fmt.Printf("SURVIVED        %-40s %s: no test of %s noticed: %s\n", m.name, took, m.pkg, m.why)
		default:
			broken++
			fmt.Printf("%-15s %-40s %s\n%s\n", verdict, m.name, took, detail)
		}
	}
	switch {
	case broken > 0:
		fmt.Printf("mutants: %d mutation(s) do not compile; update the table\n", broken)
		return 2
	case survived > 0:
		fmt.Printf("mutants: %d of %d mutation(s) survived\n", survived, len(picked))
		return 1
	}
	fmt.Printf("mutants: all %d mutation(s) behaved as expected\n", len(picked))
	return 0
}

// idsOnly is the source of the mutant of a version fence
// (Where(s.versionMatch(rows))): a Where that takes the messages of
// rows by id alone, whatever their version, each line indented by indent.
func idsOnly(indent, rows string) string {
	return indent + strings.Join([]string{
		`Where("id IN ?", slices.Collect(func(yield func(int64) bool) {`,
		"\tfor _, m := range " + rows + " {",
		"\t\tif !yield(m.ID) {",
		"\t\t\treturn",
		"\t\t}",
		"\t}",
		"})).",
	}, "\n"+indent)
}

func matches(name, only string) bool {
	if only == "" {
		return true
	}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" && strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// apply returns m's file under root with m applied, or an error when its
// pattern is not there exactly once.
func apply(root string, m mutation) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, m.file))
	if err != nil {
		return nil, err
	}
	switch n := strings.Count(string(b), m.old); n {
	case 1:
		return []byte(strings.Replace(string(b), m.old, m.new, 1)), nil
	case 0:
		return nil, fmt.Errorf("pattern not found in %s:\n%s", m.file, m.old)
	default:
		return nil, fmt.Errorf("pattern found %d times in %s (must be once):\n%s", n, m.file, m.old)
	}
}

// judge compiles the mutant's package with its tests, then runs them.
func judge(dir string, env []string, m mutation, timeout time.Duration) (verdict, detail string) {
	vet := exec.Command("go", "vet", m.pkg)
	vet.Dir, vet.Env = dir, env
	if out, err := vet.CombinedOutput(); err != nil {
		return "DOES NOT BUILD", tail(string(out), 20)
	}
	out, err := goTest(dir, env, m.pkg, timeout)
	if err == nil {
		return "SURVIVED", ""
	}
	return "KILLED", "by " + firstFailure(out)
}

func goTest(dir string, env []string, pkg string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-failfast", "-timeout", timeout.String(), pkg)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// firstFailure names the first failing test in go test's output.
func firstFailure(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "--- FAIL: ") {
			return strings.Fields(strings.TrimPrefix(t, "--- FAIL: "))[0]
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "panic:") || strings.Contains(line, "build failed") {
			return strings.TrimSpace(line)
		}
	}
	return "a failing go test"
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run it inside the posting module")
	}
	return filepath.Dir(mod), nil
}

// copyTree copies the module's source tree, without .git and local state.
func copyTree(src, dst string) error {
	skip := map[string]bool{".git": true, "bin": true, "data": true}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			if skip[rel] {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// mysqlAddr is the host:port of the test server the database tests use.
func mysqlAddr() string {
	addr := "127.0.0.1:3306"
	if raw := os.Getenv("POSTING_TEST_MYSQL_URL"); raw != "" {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			addr = u.Host
			if u.Port() == "" {
				addr = net.JoinHostPort(u.Hostname(), "3306")
			}
		}
	}
	return addr
}

func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
