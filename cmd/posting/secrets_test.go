package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// canary is the password every URL setting of TestNoPasswordInAnyOutput
// carries: it must appear in no output.
const canary = "canary-pw-4711"

// withCanary returns raw with canary as its password, user kept.
func withCanary(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), canary)
	return u.String()
}

// withQuery returns raw with the query parameter k=v added.
func withQuery(t *testing.T, raw, k, v string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// leakCase runs one command of the binary with a URL setting that carries
// the canary, on a path that fails or that logs the URL; its output must
// say says, so the path was taken.
type leakCase struct {
	name string
	env  []string
	args []string
	says string
	// running: a serve or worker that keeps running, stopped with SIGTERM
	// once its output says says.
	running bool
	// drive, when set, runs the case instead and returns all its output.
	drive func(t *testing.T, env []string, says string) string
}

// Item 7 of issue 35: a password is in no output. The canary password goes
// through every URL setting (POSTING_DATABASE_URL, its go-sql-driver DSN
// form and its password parameter, POSTING_DATABASE_DIRECT_URL,
// POSTING_RABBITMQ_URL, POSTING_AUTH_JWKS_URL, POSTING_PUBLISH_WEBHOOK_URL,
// OTEL_EXPORTER_OTLP_ENDPOINT), as basic auth or a query token, and every
// failure reachable from outside (a URL that does not parse, a bad scheme,
// port or parameter, an unreachable host, a wrong password or missing
// database on the real server, a JWKS endpoint or a webhook that fails) in
// each command that reads it (migrate, serve, worker, outbox stats,
// publications list, posts overdue); the canary is in none of their
// stdout, stderr and logs.
func TestNoPasswordInAnyOutput(t *testing.T) {
	t.Parallel()
	mysqlURL := databasetest.MySQLURL(t, "canary")
	pgURL := databasetest.PostgresURL(t, "canary")
	otherPG := databasetest.PostgresURL(t, "canary")
	amqpURL := rabbitmqtest.URL(t)
	closed := freeAddr(t) // nothing listens there

	// A JWKS endpoint that answers 500, and one that answers garbage.
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/garbage" {
			_, _ = w.Write([]byte("not json"))
			return
		}
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	failingHost := strings.TrimPrefix(failing.URL, "http://")

	databases := []struct{ name, url, says string }{
		// A password with / or # cuts the authority: url.Parse quotes the
		// rest of the password as the port.
		{"mysql unparseable", "mysql://root:" + canary + "/x@127.0.0.1:3306/db", "POSTING_DATABASE_URL"},
		{"postgres unparseable", "postgres://postgres:" + canary + "#x@127.0.0.1:5432/db", "POSTING_DATABASE_URL"},
		{"mysql dsn", "root:" + canary + "@tcp(127.0.0.1:3306)/db", "go-sql-driver DSN"},
		{"bad scheme", "mariadb://root:" + canary + "@127.0.0.1:3306/db", "POSTING_DATABASE_URL"},
		{"mysql bad loc", withQuery(t, withCanary(t, mysqlURL), "loc", "Local"), "loc=Local"},
		{"mysql bad timeout", withQuery(t, withCanary(t, mysqlURL), "timeout", "soon"), "mysql parameter timeout"},
		{"postgres bad timezone", withQuery(t, withCanary(t, pgURL), "timezone", "Europe/Paris"), "UTC only"},
		{"postgres bad sslmode", withQuery(t, withCanary(t, pgURL), "sslmode", "bogus"), "POSTING_DATABASE_URL"},
		{"postgres password parameter", withQuery(t, withQuery(t, pgURL, "password", canary), "timezone", "Local"), "UTC only"},
		{"postgres password parameter, pgx refuses", withQuery(t, withQuery(t, pgURL, "password", canary), "sslmode", "bogus"), "POSTING_DATABASE_URL"},
		{"mysql unreachable", withCanary(t, "mysql://root@"+closed+"/db"), "connection refused"},
		{"postgres unreachable", withCanary(t, "postgres://postgres@"+closed+"/db?sslmode=disable"), "connection refused"},
		{"mysql wrong password", withCanary(t, mysqlURL), "Access denied"},
		{"postgres missing database", withCanary(t, "postgres://postgres@127.0.0.1:5432/canary_missing?sslmode=disable"), "canary_missing"},
	}
	var cases []leakCase
	commands := [][]string{{"migrate"}, {"serve"}, {"worker"}, {"outbox", "stats"}, {"publications", "list"}, {"posts", "overdue"}}
	for _, d := range databases {
		for _, args := range commands {
			cases = append(cases, leakCase{name: strings.Join(args, " ") + "/" + d.name, args: args, says: d.says,
				env: []string{"POSTING_DATABASE_URL=" + d.url}})
		}
	}

	directs := []struct{ name, url, says string }{
		{"unparseable", "postgres://postgres:" + canary + "#x@127.0.0.1:5432/db", "POSTING_DATABASE_DIRECT_URL"},
		{"bad scheme", withCanary(t, strings.Replace(pgURL, "postgres://", "mysql://", 1)), "POSTING_DATABASE_DIRECT_URL"},
		{"bad timezone", withQuery(t, withCanary(t, pgURL), "timezone", "Europe/Paris"), "POSTING_DATABASE_DIRECT_URL"},
		{"password parameter", withQuery(t, withQuery(t, pgURL, "password", canary), "timezone", "Local"), "POSTING_DATABASE_DIRECT_URL"},
		{"other database", withCanary(t, otherPG), "POSTING_DATABASE_DIRECT_URL"},
		{"unreachable", withCanary(t, "postgres://postgres@"+closed+"/db?sslmode=disable"), "POSTING_DATABASE_DIRECT_URL"},
		{"missing database", withCanary(t, "postgres://postgres@127.0.0.1:5432/canary_missing?sslmode=disable"), "canary_missing"},
	}
	for _, d := range directs {
		for _, command := range []string{"migrate", "serve", "worker"} {
			cases = append(cases, leakCase{name: command + "/direct " + d.name, args: []string{command}, says: d.says,
				env: []string{"POSTING_DATABASE_URL=" + pgURL, "POSTING_DATABASE_DIRECT_URL=" + d.url}})
		}
	}

	// serve gives up on the broker within 15 s; the worker keeps trying, and
	// is stopped once it said so.
	refused := "lost or refused its connection"
	rabbits := []struct{ name, url, serveSays, workerSays string }{
		{"unparseable", "amqp://guest:" + canary + "/x@127.0.0.1:5672/", "POSTING_RABBITMQ_URL", "POSTING_RABBITMQ_URL"},
		{"bad scheme", withCanary(t, strings.Replace(amqpURL, "amqp://", "http://", 1)), "POSTING_RABBITMQ_URL", "POSTING_RABBITMQ_URL"},
		{"bad port", "amqp://guest:" + canary + "@127.0.0.1:99999/", "outside 1..65535", "outside 1..65535"},
		{"unreachable", withCanary(t, "amqp://guest@"+closed+"/"), "connection refused", refused},
		{"wrong password", withCanary(t, amqpURL), "username or password not allowed", refused},
	}
	for _, r := range rabbits {
		for command, says := range map[string]string{"serve": r.serveSays, "worker": r.workerSays} {
			cases = append(cases, leakCase{name: command + "/rabbitmq " + r.name, args: []string{command}, says: says,
				running: says == refused,
				env:     []string{"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"), "POSTING_RABBITMQ_URL=" + r.url}})
		}
	}

	jwks := []struct {
		name, url, says string
		running         bool
	}{
		{"unparseable", "https://u:" + canary + "/x@idp.example.com/jwks", "POSTING_AUTH_JWKS_URL", false},
		{"plain http to another host", "http://u:" + canary + "@idp.example.com/jwks", "POSTING_AUTH_JWKS_URL", false},
		{"bad scheme", "ftp://u:" + canary + "@127.0.0.1/jwks", "POSTING_AUTH_JWKS_URL", false},
		{"unreachable", "http://u:" + canary + "@" + closed + "/jwks", "jwks fetch failed", true},
		{"answers 500", "http://u:" + canary + "@" + failingHost + "/jwks", "jwks fetch failed", true},
		{"answers garbage", "http://u:" + canary + "@" + failingHost + "/garbage", "jwks fetch failed", true},
		{"unreachable, token in the query", "http://" + closed + "/jwks?token=" + canary, "jwks fetch failed", true},
	}
	for _, j := range jwks {
		cases = append(cases, leakCase{name: "serve/jwks " + j.name, args: []string{"serve"}, says: j.says, running: j.running,
			env: []string{"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"), "POSTING_AUTH_JWKS_URL=" + j.url}})
	}

	webhooks := []struct{ name, url, says string }{
		{"unparseable", "https://u:" + canary + "/x@hooks.example.com/hook", "POSTING_PUBLISH_WEBHOOK_URL"},
		{"bad scheme", "ftp://u:" + canary + "@hooks.example.com/hook", "POSTING_PUBLISH_WEBHOOK_URL"},
		{"unreachable", "http://u:" + canary + "@" + closed + "/hook", "worker started"},
	}
	// serve on RabbitMQ runs no worker, but names the webhook in /asyncapi.json.
	cases = append(cases, leakCase{name: "serve/webhook unparseable, on RabbitMQ", args: []string{"serve"}, says: "POSTING_PUBLISH_WEBHOOK_URL",
		env: []string{"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"), "POSTING_RABBITMQ_URL=" + amqpURL,
			"POSTING_PUBLISH_WEBHOOK_URL=https://u:" + canary + "/x@hooks.example.com/hook"}})
	for _, w := range webhooks {
		for _, command := range []string{"serve", "worker"} {
			env := []string{"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"), "POSTING_PUBLISH_WEBHOOK_URL=" + w.url}
			if command == "worker" {
				// A worker alone starts on a broker of its own: on an
				// embedded broker it waits for the serve that runs it.
				env = append(env, "POSTING_RABBITMQ_URL="+amqpURL)
			}
			cases = append(cases, leakCase{name: command + "/webhook " + w.name, args: []string{command}, says: w.says,
				running: strings.Contains(w.says, "started"), env: env})
		}
	}

	// The OTLP endpoint (OpenTelemetry's own variable) with basic auth:
	// logged at start, and spans not exported at the shutdown.
	cases = append(cases, leakCase{name: "serve/otlp endpoint unreachable", args: []string{"serve"}, says: "tracing on", running: true,
		env: []string{"POSTING_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "p.db"),
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://u:" + canary + "@" + closed + "/otlp?token=" + canary}})

	// A post published through a webhook that refuses it, and through one
	// that cannot be reached: the worker's logs and `publications list`.
	refuser := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"nope"}`, http.StatusBadRequest)
	}))
	t.Cleanup(refuser.Close)
	refuserHost := strings.TrimPrefix(refuser.URL, "http://")
	for _, w := range []struct{ name, url, says string }{
		{"refused", "http://u:" + canary + "@" + refuserHost + "/hook?token=" + canary, "400"},
		{"unreachable", "http://u:" + canary + "@" + closed + "/hook?token=" + canary, "connection refused"},
	} {
		cases = append(cases, leakCase{name: "publications list/webhook " + w.name, says: w.says, drive: publishThrough(w.url)})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := append([]string{"POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t),
				"POSTING_WORKER_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}, c.env...)
			var out string
			if c.drive != nil {
				out = c.drive(t, env, c.says)
			} else {
				out = runToEnd(t, c, env)
			}
			require.Contains(t, out, c.says, "the failure path was not taken")
			require.NotContains(t, out, canary, "the password is in the output:\n%s", out)
			// Nor a part of it long enough to be guessed from.
			require.NotContains(t, out, canary[:9], "a part of the password is in the output:\n%s", out)
		})
	}
}

// runToEnd runs c's command and returns its output: once it exits, or, for a
// long-running one, once its output says c.says (within 60 s), after SIGTERM.
func runToEnd(t *testing.T, c leakCase, env []string) string {
	t.Helper()
	p := postingtest.Start(t, nil, env, c.args...)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case <-p.Done:
			return p.Out.String()
		case <-deadline:
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			<-p.Done
			return p.Out.String()
		case <-time.After(100 * time.Millisecond):
			if c.running && strings.Contains(p.Out.String(), c.says) {
				_ = p.Cmd.Process.Signal(syscall.SIGTERM)
				<-p.Done
				return p.Out.String()
			}
		}
	}
}

// publishThrough returns a leakCase.drive that runs serve, embedded, with
// its worker calling hookURL, creates a post due in 3 s, and waits until
// serve's log or `posting publications list` shows says; it returns the
// output of both.
func publishThrough(hookURL string) func(t *testing.T, env []string, says string) string {
	return func(t *testing.T, env []string, says string) string {
		dbURL := "sqlite://" + filepath.Join(t.TempDir(), "p.db")
		env = append(env, "POSTING_DATABASE_URL="+dbURL, "POSTING_PUBLISH_WEBHOOK_URL="+hookURL,
			"POSTING_SCHEDULER_SPEC=@every 1s", "POSTING_RELAY_INTERVAL=100ms")
		serve := postingtest.StartServe(t, env...)
		// Due a few seconds on: a loaded machine can take a second to
		// answer, and a time past by then is refused.
		postingtest.CreatePost(t, serve.HTTP, time.Now().Add(3*time.Second))
		var list string
		require.Eventually(t, func() bool {
			list, _ = runBinary(t, []string{"POSTING_DATABASE_URL=" + dbURL}, "publications", "list")
			return strings.Contains(list+serve.Out.String(), says)
		}, 60*time.Second, 200*time.Millisecond, "neither serve's log nor publications list showed %q", says)
		serve.Terminate(t)
		return serve.Out.String() + list
	}
}
