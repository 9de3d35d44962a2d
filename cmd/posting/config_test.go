package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A flag given on the command line wins over its environment twin, even when
// the twin holds a value that would be refused.
func TestFlagBeatsItsEnvTwin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flagDB, envDB := filepath.Join(dir, "flag.db"), filepath.Join(dir, "env.db")
	out, code := runBinary(t, []string{"POSTING_DATABASE_URL=sqlite://" + envDB, "POSTING_LOG_FORMAT=xml"},
		"migrate", "--database-url", "sqlite://"+flagDB, "--log-format", "text")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "migrations to sqlite://"+flagDB)
	require.FileExists(t, flagDB)
	require.NoFileExists(t, envDB, "the environment's database was not touched")

	// Without the flags the twins count: the bad log format stops it.
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=sqlite://" + envDB, "POSTING_LOG_FORMAT=xml"}, "migrate")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `POSTING_LOG_FORMAT="xml"`)
}

// --help names the environment twin of every flag that has one; a
// subcommand's own flags, which are not read from the environment, name
// none.
func TestHelpNamesEveryEnvTwin(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{{"serve"}, {"worker"}, {"migrate"}} {
		var out bytes.Buffer
		require.NoError(t, Run(context.Background(), append(path, "--help"), &out, &out))
		help := out.String()
		cmd, _, err := newRootCommand(io.Discard, io.Discard).Find(path)
		require.NoError(t, err)
		n := 0
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			line := regexp.MustCompile(`(?m)^.*--` + regexp.QuoteMeta(f.Name) + `\b.*$`).FindString(help)
			require.NotEmpty(t, line, "%v --help lists --%s", path, f.Name)
			if f.Name == "help" {
				return
			}
			n++
			require.Contains(t, line, "(env "+envName(f.Name)+")", "%v --help", path)
		})
		require.Positive(t, n, "%v has flags", path)
	}
	var out bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"outbox", "list", "--help"}, &out, &out))
	require.Contains(t, out.String(), "(env POSTING_DATABASE_URL)")
	require.Contains(t, out.String(), "(env POSTING_LOG_FORMAT)")
	require.NotContains(t, out.String(), "POSTING_STATUS", "outbox list --status has no twin")
	require.NotContains(t, out.String(), "POSTING_JSON", "nor --json")
}

// An overdue post whose reservation made no publication is announced again
// at most 3 times unless POSTING_OVERDUE_REANNOUNCE says otherwise: the
// checker's default, serve's flag and its --help agree.
func TestOverdueReannounceDefaultsToThree(t *testing.T) {
	t.Parallel()
	require.Equal(t, 3, overdue.DefaultConfig().Reannounce)
	cmd := newServeCommand()
	f := cmd.Flags().Lookup("overdue-reannounce")
	require.NotNil(t, f)
	require.Equal(t, "3", f.DefValue)
	var s settings
	addServeFlags(pflag.NewFlagSet("serve", pflag.ContinueOnError), &s)
	require.Equal(t, 3, s.overdueConfig().Reannounce, "the settings without the variable")
	var out bytes.Buffer
	require.NoError(t, Run(context.Background(), []string{"serve", "--help"}, &out, &out))
	require.Regexp(t, `--overdue-reannounce int .*\(env POSTING_OVERDUE_REANNOUNCE\) \(default 3\)`, out.String())
}

// docs/configuration.md names every setting a command's --help lists, and
// nothing that no command reads: a setting added without its line on the
// page, or a line left for a setting that is gone, fails here.
func TestConfigurationPageNamesEverySettingOfHelp(t *testing.T) {
	t.Parallel()
	twin := regexp.MustCompile(`\(env (POSTING_[A-Z0-9_]+)\)`)
	inHelp := map[string]bool{}
	var visit func(path []string, cmd *cobra.Command)
	visit = func(path []string, cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			p := append(append([]string{}, path...), sub.Name())
			var out bytes.Buffer
			require.NoError(t, Run(context.Background(), append(p, "--help"), &out, &out), "%v --help", p)
			for _, m := range twin.FindAllStringSubmatch(out.String(), -1) {
				inHelp[m[1]] = true
			}
			visit(p, sub)
		}
	}
	visit(nil, newRootCommand(io.Discard, io.Discard))
	require.Contains(t, inHelp, "POSTING_DATABASE_URL", "the walk reached the commands")

	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	require.NoError(t, err)
	onPage := map[string]bool{}
	for _, m := range regexp.MustCompile(`POSTING_[A-Z0-9_]+`).FindAllString(string(page), -1) {
		onPage[m] = true
	}
	require.Empty(t, missing(inHelp, onPage), "settings of --help missing from docs/configuration.md")
	require.Empty(t, missing(onPage, inHelp), "settings on docs/configuration.md that no command's --help lists")
}

// missing lists the keys of a that b lacks, sorted.
func missing(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// A stale limit that a healthy Kafka send and the write of its results could
// outlast is a bad setting: serve exits 2 naming it, its value and the
// minimum, which the relay learns from the producer (through the metrics
// wrapper).
func TestServeRefusesAStaleLimitBelowTheSendBound(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_RELAY_STALE_AFTER=11s", "POSTING_DATA_DIR=" + t.TempDir(),
		"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `POSTING_RELAY_STALE_AFTER="11s"`)
	require.Contains(t, out, "must be more than 1m15s", "the minimum: (30s send + 30s write) and a quarter")
}

// POSTING_IDEMPOTENCY_RETENTION outside 1m..720h (or no duration at all)
// stops serve at start with exit status 2, naming the setting, its value
// and the bounds, before anything is created.
func TestIdempotencyRetentionOutsideItsBoundsStopsServe(t *testing.T) {
	for _, c := range []struct{ value, shown, reason string }{
		{"59s", "59s", "want 1m0s..720h0m0s"},
		{"721h", "721h0m0s", "want 1m0s..720h0m0s"},
		{"0s", "0s", "want 1m0s..720h0m0s"},
		{"1day", "1day", `unknown unit "day"`},
	} {
		t.Setenv("POSTING_IDEMPOTENCY_RETENTION", c.value)
		dir := t.TempDir()
		_, errOut, code := runCLI(t, "serve", "--data-dir", dir)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, `invalid POSTING_IDEMPOTENCY_RETENTION="`+c.shown+`"`, c.value)
		require.Contains(t, errOut, c.reason, c.value)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "nothing created in the data dir: %s", c.value)
	}
}

// POSTING_DATABASE_DIRECT_URL is refused with exit status 2 naming it when
// it cannot be the direct URL of a PostgreSQL database: beside a SQLite
// database, or with another scheme; nothing is migrated then.
func TestDatabaseDirectURLBadValueExits2(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{"POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_DATABASE_DIRECT_URL=postgres://127.0.0.1/x"}, "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL")
	require.Contains(t, out, "PostgreSQL database behind a pooler")

	pg := databasetest.PostgresURL(t, "direct")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + pg, "POSTING_DATABASE_DIRECT_URL=mysql://root@127.0.0.1/x"}, "migrate")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `POSTING_DATABASE_DIRECT_URL="mysql://root@127.0.0.1/x"`)
	db, err := database.Open(pg, "")
	require.NoError(t, err)
	defer db.Close()
	require.False(t, db.Migrator().HasTable("posts"), "the refused run migrated")

	// A direct URL that reaches another database is a bad setting too.
	other := databasetest.PostgresURL(t, "direct_other")
	out, code = runBinary(t, []string{"POSTING_DATABASE_URL=" + pg, "POSTING_DATABASE_DIRECT_URL=" + other}, "migrate")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "POSTING_DATABASE_DIRECT_URL reaches database")
	require.False(t, db.Migrator().HasTable("posts"), "the refused run migrated")
}

// POSTING_WORKER_CONCURRENCY reaches the worker's configuration, and values
// out of 0..256 stop serve and worker with exit status 2.
func TestWorkerConcurrencySetting(t *testing.T) {
	t.Parallel()
	s := settings{WorkerGroup: "g", WorkerConcurrency: 7}
	require.Equal(t, 7, s.workerConfig(nil, nil, nil).Concurrency)
	for _, cmd := range []string{"serve", "worker"} {
		for _, v := range []string{"-1", "257", "many"} {
			out, code := runBinary(t, []string{"POSTING_WORKER_CONCURRENCY=" + v, "POSTING_DATA_DIR=" + t.TempDir(),
				"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}, cmd)
			require.Equal(t, 2, code, "%s %s: %s", cmd, v, out)
			require.Contains(t, out, fmt.Sprintf("POSTING_WORKER_CONCURRENCY=%q", v), cmd)
		}
	}
}

// Without POSTING_KAFKA_BROKERS, `posting worker` reads the embedded broker
// of a running serve at POSTING_EMBEDDED_KAFKA_ADDR; a bad address there is
// that setting's fault, and the message must name it, not
// POSTING_KAFKA_BROKERS, which the operator never set.
func TestWorkerBadEmbeddedAddrNamesItsSetting(t *testing.T) {
	t.Setenv("POSTING_KAFKA_BROKERS", "")
	t.Setenv("POSTING_EMBEDDED_KAFKA_ADDR", "nonsense")
	_, errOut, code := runCLI(t, "worker", "--data-dir", t.TempDir(), "--worker-http-addr", "")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `invalid POSTING_EMBEDDED_KAFKA_ADDR="nonsense"`)
	require.NotContains(t, errOut, "POSTING_KAFKA_BROKERS")

	// With brokers set, a bad one is still named as POSTING_KAFKA_BROKERS.
	t.Setenv("POSTING_KAFKA_BROKERS", "nohostport")
	_, errOut, code = runCLI(t, "worker", "--data-dir", t.TempDir(), "--worker-http-addr", "")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `invalid POSTING_KAFKA_BROKERS="nohostport"`)
}

// POSTING_WORKER_CONCURRENCY=0 is the worker's default (README "Settings"),
// so a refusal must not say the setting wants 1..256 only, as it did before
// the settings table: "want 1..256, or 0 for the default".
func TestWorkerConcurrencyRefusalSaysZeroIsTheDefault(t *testing.T) {
	for _, cmd := range []string{"serve", "worker"} {
		_, errOut, code := runCLI(t, cmd, "--data-dir", t.TempDir(), "--worker-concurrency", "257")
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, `invalid POSTING_WORKER_CONCURRENCY="257"`, cmd)
		require.Contains(t, errOut, "or 0 for the worker's default", cmd)
	}
}

// A pool setting out of its limits stops every command that opens the
// database before it opens it, naming the setting.
func TestDatabasePoolSettingsOutOfLimitsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--database-max-conns", "-1"}, `invalid POSTING_DATABASE_MAX_CONNS="-1"`},
		{[]string{"--database-max-conns", "1001"}, `invalid POSTING_DATABASE_MAX_CONNS="1001"`},
		{[]string{"--database-max-conns", "4", "--database-max-idle-conns", "5"}, `invalid POSTING_DATABASE_MAX_IDLE_CONNS="5"`},
	} {
		for _, cmd := range []string{"serve", "worker", "migrate"} {
			dir := t.TempDir()
			_, errOut, code := runCLI(t, append([]string{cmd, "--data-dir", dir}, tc.args...)...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, tc.msg, cmd)
			require.NoFileExists(t, filepath.Join(dir, "posting.db"), "a refused setting opened the database")
		}
	}
}

// An instance id too long for the claims' column stops serve before it
// opens anything, naming the setting.
func TestInstanceIDTooLongForClaimsNamesTheSetting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, errOut, code := runCLI(t, "serve", "--data-dir", dir, "--instance-id", strings.Repeat("x", relay.MaxInstanceIDLen+1))
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, `invalid POSTING_INSTANCE_ID="`)
	require.Contains(t, errOut, "longer than 200 bytes")
	require.NoFileExists(t, filepath.Join(dir, "posting.db"), "a refused setting opened the database")
}

// POSTING_WEBHOOK_SECRET reaches the webhook's configuration; a bad secret
// stops serve and worker with exit status 2 naming the setting and never
// printing the secret, and so does a secret with no webhook URL to sign.
func TestWebhookSecretSetting(t *testing.T) {
	t.Parallel()
	good := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	s := settings{PublishWebhookURL: "http://127.0.0.1:1/hook", WebhookSecret: good}
	require.Equal(t, good, s.webhookConfig().Secret)
	require.NoError(t, s.validateWebhookSecret())

	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("hunter2-hunter2"))
	for _, cmd := range []string{"serve", "worker"} {
		for secret, want := range map[string]string{
			"hunter2-hunter2-hunter2-hunter2": "secret 1 of 1 does not begin with whsec_",
			good + " " + short:                "secret 2 of 2 is a key of 15 bytes",
			"whsec_hunter2!!":                 "is not whsec_ followed by standard base64",
		} {
			out, code := runBinary(t, []string{"POSTING_WEBHOOK_SECRET=" + secret, "POSTING_PUBLISH_WEBHOOK_URL=http://127.0.0.1:1/hook",
				"POSTING_DATA_DIR=" + t.TempDir(), "POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t),
				"POSTING_WORKER_HTTP_ADDR="}, cmd)
			require.Equal(t, 2, code, "%s: %s", cmd, out)
			require.Contains(t, out, `invalid POSTING_WEBHOOK_SECRET="<hidden>"`, cmd)
			require.Contains(t, out, want, cmd)
			require.NotContains(t, out, "hunter2", cmd)
			require.NotContains(t, out, strings.TrimPrefix(good, "whsec_"), cmd)
		}
		out, code := runBinary(t, []string{"POSTING_WEBHOOK_SECRET=" + good, "POSTING_DATA_DIR=" + t.TempDir(),
			"POSTING_HTTP_ADDR=" + freeAddr(t), "POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t), "POSTING_WORKER_HTTP_ADDR="}, cmd)
		require.Equal(t, 2, code, "%s: %s", cmd, out)
		require.Contains(t, out, "POSTING_WEBHOOK_SECRET is set but POSTING_PUBLISH_WEBHOOK_URL is not", cmd)
		require.NotContains(t, out, strings.TrimPrefix(good, "whsec_"), cmd)
	}
}

// The statistics keeper's interval out of its limits stops serve and worker
// before they open the database, naming the setting; 0 (off) is taken.
func TestStatisticsIntervalOutOfLimitsNamesTheSetting(t *testing.T) {
	for _, value := range []string{"500ms", "2h", "-1s"} {
		for _, cmd := range []string{"serve", "worker"} {
			dir := t.TempDir()
			_, errOut, code := runCLI(t, cmd, "--data-dir", dir, "--database-statistics-interval", value)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, `invalid POSTING_DATABASE_STATISTICS_INTERVAL="`, cmd)
			require.Contains(t, errOut, "want 0 (never) or 1s..1h", cmd)
			require.NoFileExists(t, filepath.Join(dir, "posting.db"), "a refused setting opened the database")
		}
	}
}
