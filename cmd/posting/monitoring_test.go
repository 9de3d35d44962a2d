package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/pgbouncertest"
)

// The shipped monitoring files, relative to this package.
var (
	alertsFile     = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
	alertTestsFile = filepath.Join("..", "..", "deploy", "prometheus", "alerts_test.yml")
	promConfigFile = filepath.Join("..", "..", "deploy", "prometheus", "prometheus.yml")
	dashboardFile  = filepath.Join("..", "..", "deploy", "grafana", "posting.json")
	operationsFile = filepath.Join("..", "..", "docs", "operations.md")
)

// requirePrometheus returns the paths of Debian's prometheus and promtool,
// skipping the test when one is missing unless
// POSTING_TEST_REQUIRE_PROMETHEUS=1 (as in CI), which fails it instead.
func requirePrometheus(t *testing.T) (prometheus, promtool string) {
	t.Helper()
	prometheus, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	if err1 == nil && err2 == nil {
		return prometheus, promtool
	}
	msg := "prometheus or promtool is not on PATH (apt-get install -y prometheus)"
	if os.Getenv("POSTING_TEST_REQUIRE_PROMETHEUS") == "1" {
		t.Fatal(msg + " and POSTING_TEST_REQUIRE_PROMETHEUS=1")
	}
	t.Skip(msg + "; set POSTING_TEST_REQUIRE_PROMETHEUS=1 to fail instead")
	return "", ""
}

// alertRule is one rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &f))
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// dashboardQueries returns every PromQL query of the Grafana dashboard,
// with Grafana's $__rate_interval made a plain range.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	var qs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q has a target without a query", p.Title)
			qs = append(qs, strings.ReplaceAll(tg.Expr, "$__rate_interval", "1m"))
		}
	}
	require.NotEmpty(t, qs)
	return qs
}

// metricNameRe finds the service's metric names in a query (every one is
// posting_*), plus Prometheus's own up.
var metricNameRe = regexp.MustCompile(`\bposting_[a-z0-9_]+\b|\bup\{`)

// queriedMetrics returns the metric names the rules and the dashboard use,
// histogram series (_bucket) named by their family.
func queriedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{} // name -> where
	add := func(q, where string) {
		for _, name := range metricNameRe.FindAllString(q, -1) {
			if name == "up{" {
				continue // Prometheus's own series of each scrape
			}
			name = strings.TrimSuffix(name, "_bucket")
			used[name] = append(used[name], where)
		}
	}
	for _, r := range loadAlertRules(t) {
		add(r.Expr, "alert "+r.Alert)
	}
	for _, q := range dashboardQueries(t) {
		add(q, "dashboard")
	}
	return used
}

// The rules and the dashboard query no metric whose HELP says it is
// deprecated (such as posting_kafka_messages_total, kept one release after
// its rename to posting_broker_messages_total): what ships reads the names
// that stay, so the removal breaks nothing of ours.
func TestMonitoringQueriesNoDeprecatedMetric(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	metrics.New(nil, "monitoring").Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	require.NoError(t, err)
	used := queriedMetrics(t)
	for name, f := range fams {
		if strings.HasPrefix(f.GetHelp(), "Deprecated:") {
			require.NotContains(t, used, name, "%s is deprecated: %s", name, f.GetHelp())
		}
	}
}

// Every alert has a summary, a description and a runbook link to a section
// of docs/operations.md that exists; the rules pass promtool's check and
// their unit tests, and the compose configuration is valid.
func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	_, promtool := requirePrometheus(t)
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		{"test", "rules", alertTestsFile},
		{"check", "config", promConfigFile},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}

	ops, err := os.ReadFile(operationsFile)
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(ops), "\n") {
		if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") {
			anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(h), " ", "-"))] = true
		}
	}
	tests, err := os.ReadFile(alertTestsFile)
	require.NoError(t, err)
	for _, r := range loadAlertRules(t) {
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		link := r.Annotations["runbook_url"]
		_, anchor, ok := strings.Cut(link, "docs/operations.md#")
		require.True(t, ok, "%s: runbook_url %q does not point into docs/operations.md", r.Alert, link)
		require.True(t, anchors[anchor], "%s: docs/operations.md has no section #%s", r.Alert, anchor)
		require.Contains(t, string(tests), "alertname: "+r.Alert, "%s has no promtool unit test", r.Alert)
	}
}

// scrapeNames returns the metric family names a /metrics endpoint exports.
func scrapeNames(t *testing.T, addr string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	names := map[string]bool{}
	for n := range fams {
		names[n] = true
	}
	return names
}

// promAPI asks a Prometheus HTTP API path and returns its data; the API's
// own status must be success.
func promAPI(t *testing.T, base, path string, q url.Values) json.RawMessage {
	t.Helper()
	resp, err := http.Get(base + path + "?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(raw, &r), string(raw))
	require.Equal(t, "success", r.Status, "%s %v: %s", path, q, r.Error)
	return r.Data
}

// startPrometheus runs Debian's prometheus on a loopback port with a
// temporary configuration that scrapes targets (job name -> address) every
// second and evaluates the shipped rules every second, and returns its base
// URL once it is ready.
func startPrometheus(t *testing.T, bin string, targets map[string]string) string {
	t.Helper()
	rules, err := filepath.Abs(alertsFile)
	require.NoError(t, err)
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [%q]\nscrape_configs:\n", rules)
	for job, addr := range targets {
		cfg += fmt.Sprintf("  - job_name: %q\n    static_configs: [{targets: [%q]}]\n", job, addr)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
	addr := freeAddr(t)
	out := &logtest.Buffer{}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "prometheus never became ready")
	return base
}

// `posting serve` and `posting worker` run on PostgreSQL with the in-process
// broker: every metric the rules and the dashboard query is exported by one
// of them; a real Prometheus scraping both evaluates every alert rule and
// dashboard query without error; and once the broker rejects a post's events
// and they end FAIL, PostingOutboxFailRows fires.
func TestMonitoringAgainstServeAndWorker(t *testing.T) {
	t.Parallel()
	dbURL := databasetest.URL(t, database.PostgreSQL, "monitoring")
	b := kafkatest.Start(t)
	logs := &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve and worker output:\n%s", logs.String())
		}
	})
	serveAddr, workerAddr := freeAddr(t), freeAddr(t)
	common := []string{"--database-url", dbURL, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir()}
	// No retry after a rejection: the first refused attempt makes FAIL.
	runInProcess(t, logs, append([]string{"serve", "--http-addr", serveAddr, "--instance-id", "monitoring-serve",
		"--relay-interval", "100ms", "--relay-max-retries", "0"}, common...)...)
	require.Eventually(t, func() bool { code, _ := httpGet(serveAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "serve never became ready")
	runInProcess(t, logs, append([]string{"worker", "--instance-id", "monitoring-worker", "--worker-http-addr", workerAddr}, common...)...)
	require.Eventually(t, func() bool { code, _ := httpGet(workerAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "worker never became ready")

	// A post whose events reach the worker: the HTTP, consumer and lag
	// series exist from then on.
	first := createPost(t, serveAddr, time.Now().Add(time.Hour))
	b.Records(t, 1, 30*time.Second)

	t.Run("every queried metric is exported", func(t *testing.T) {
		used := queriedMetrics(t)
		// The worker's lag and consumed series appear with its first
		// scrape after the event: ask again for a while, then name what
		// is missing.
		var serveNames, workerNames map[string]bool
		var missing []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			serveNames, workerNames = scrapeNames(t, serveAddr), scrapeNames(t, workerAddr)
			missing = missing[:0]
			for name, where := range used {
				if !serveNames[name] && !workerNames[name] {
					missing = append(missing, fmt.Sprintf("%s (used by %s)", name, strings.Join(where, ", ")))
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		require.Empty(t, missing, "metrics the rules or the dashboard use that neither serve nor worker exports")
		require.True(t, workerNames["posting_kafka_consumer_lag_messages"], "the worker exports its group's lag")
		require.True(t, serveNames["posting_dependency_up"] && workerNames["posting_dependency_up"])
	})

	prometheus, _ := requirePrometheus(t)
	base := startPrometheus(t, prometheus, map[string]string{"posting": serveAddr, "posting-worker": workerAddr})

	t.Run("every rule and dashboard query evaluates", func(t *testing.T) {
		type rule struct {
			Name           string    `json:"name"`
			Query          string    `json:"query"`
			Health         string    `json:"health"`
			LastError      string    `json:"lastError"`
			LastEvaluation time.Time `json:"lastEvaluation"`
		}
		var rules []rule
		require.Eventually(t, func() bool {
			var d struct {
				Groups []struct {
					Rules []rule `json:"rules"`
				} `json:"groups"`
			}
			require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/rules", nil), &d))
			rules = nil
			for _, g := range d.Groups {
				rules = append(rules, g.Rules...)
			}
			for _, r := range rules {
				if r.LastEvaluation.IsZero() || r.LastEvaluation.Year() < 2000 {
					return false
				}
			}
			return len(rules) > 0
		}, 30*time.Second, 200*time.Millisecond, "prometheus never evaluated every rule")
		require.Len(t, rules, len(loadAlertRules(t)))
		for _, r := range rules {
			require.Equal(t, "ok", r.Health, "%s: %s", r.Name, r.LastError)
			promAPI(t, base, "/api/v1/query", url.Values{"query": {r.Query}})
		}
		for _, q := range dashboardQueries(t) {
			promAPI(t, base, "/api/v1/query", url.Values{"query": {q}})
		}
		// The scrapes arrive: both targets up, both dependencies up on each.
		var up struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		}
		require.Eventually(t, func() bool {
			require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/query",
				url.Values{"query": {`posting_dependency_up == 1`}}), &up))
			return len(up.Result) == 4
		}, 30*time.Second, 200*time.Millisecond, "database and kafka up on serve and worker")
	})

	t.Run("FAIL rows fire PostingOutboxFailRows", func(t *testing.T) {
		type alert struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
			Value  string            `json:"value"`
		}
		alerts := func() []alert {
			var d struct {
				Alerts []alert `json:"alerts"`
			}
			require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/alerts", nil), &d))
			return d.Alerts
		}
		for _, a := range alerts() {
			require.NotEqual(t, "PostingOutboxFailRows", a.Labels["alertname"], "fires before any FAIL row")
		}
		// Post ids are sequential: the next one is rejected by the broker.
		next := strconv.FormatInt(int64(first["id"].(float64))+1, 10)
		b.RejectKey(next, 10) // MESSAGE_TOO_LARGE: refused, not an outage
		second := createPost(t, serveAddr, time.Now().Add(time.Hour))
		require.Equal(t, next, strconv.FormatInt(int64(second["id"].(float64)), 10))

		db := databasetest.Open(t, dbURL)
		require.Eventually(t, func() bool {
			var n int64
			require.NoError(t, db.DB.Model(&outbox.Message{}).Where("status = ?", outbox.StatusFail).Count(&n).Error)
			return n > 0
		}, 30*time.Second, 100*time.Millisecond, "the rejected post's event never ended FAIL")

		var fired alert
		require.Eventually(t, func() bool {
			for _, a := range alerts() {
				if a.Labels["alertname"] == "PostingOutboxFailRows" && a.State == "firing" {
					fired = a
					return true
				}
			}
			return false
		}, 30*time.Second, 200*time.Millisecond, "PostingOutboxFailRows never fired")
		require.Equal(t, "critical", fired.Labels["severity"])
		v, err := strconv.ParseFloat(fired.Value, 64)
		require.NoError(t, err, fired.Value)
		require.GreaterOrEqual(t, v, 1.0, "FAIL rows not discarded")
		for _, a := range alerts() {
			require.NotEqual(t, "PostingDatabaseUnreachable", a.Labels["alertname"])
			require.NotEqual(t, "PostingBrokerUnreachable", a.Labels["alertname"])
		}
	})

	t.Run("every selector and grouping label matches scraped series", func(t *testing.T) {
		// A rule whose label matcher names a value or a label the service
		// does not export evaluates without error and never fires; promtool's
		// unit tests cannot see it, as their series are written by hand.
		var queries []string
		for _, r := range loadAlertRules(t) {
			queries = append(queries, r.Expr)
		}
		queries = append(queries, dashboardQueries(t)...)
		for _, q := range queries {
			for _, sel := range selectorRe.FindAllString(q, -1) {
				var d struct {
					Result []json.RawMessage `json:"result"`
				}
				require.Eventually(t, func() bool {
					require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/query", url.Values{"query": {"count(" + sel + ")"}}), &d))
					return len(d.Result) > 0
				}, 30*time.Second, 200*time.Millisecond, "%s selects no series that serve or worker export (in %s)", sel, q)
			}
			for _, m := range groupingRe.FindAllStringSubmatch(q, -1) {
				var series []map[string]string
				require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/series", url.Values{"match[]": {m[2]}}), &series))
				require.NotEmpty(t, series, "%s has no series (in %s)", m[2], q)
				for _, label := range strings.Split(m[1], ",") {
					label = strings.TrimSpace(label)
					if label == "le" || label == "" {
						continue
					}
					_, ok := series[0][label]
					require.True(t, ok, "%s has no label %q to group by (in %s): %v", m[2], label, q, series[0])
				}
			}
		}
	})
}

// selectorRe finds the vector selectors with label matchers in a query.
var selectorRe = regexp.MustCompile(`\b(?:posting_[a-z0-9_]+|up)\{[^}]*\}`)

// groupingRe finds `by (labels) (` followed by a metric, possibly inside a
// rate or increase: the labels and the metric.
var groupingRe = regexp.MustCompile(`by \(([^)]*)\) \((?:[a-z_]+\()?(posting_[a-z0-9_]+)`)

// serve through PgBouncer, scraped by a real Prometheus: when the pooler
// dies, serve's database check exports 0 (rather than dropping the series)
// and PostingDatabaseUnreachable becomes pending for it; once the pooler
// is back, the alert is gone.
func TestMonitoringDatabaseUnreachableAlertFollowsThePooler(t *testing.T) {
	t.Parallel()
	prometheus, _ := requirePrometheus(t)
	direct := databasetest.URL(t, database.PostgreSQL, "monitoringdown")
	bouncer := pgbouncertest.StartServer(t, direct, pgbouncertest.Transaction, pgbouncertest.PoolSize)
	b := kafkatest.Start(t)
	logs := &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve output:\n%s", logs.String())
		}
	})
	serveAddr := freeAddr(t)
	runInProcess(t, logs, "serve", "--http-addr", serveAddr, "--instance-id", "monitoring-down",
		"--database-url", bouncer.URL, "--database-direct-url", direct, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir())
	require.Eventually(t, func() bool { code, _ := httpGet(serveAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "serve never became ready")
	base := startPrometheus(t, prometheus, map[string]string{"posting": serveAddr})

	state := func() string {
		var d struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/alerts", nil), &d))
		for _, a := range d.Alerts {
			if a.Labels["alertname"] == "PostingDatabaseUnreachable" {
				require.Equal(t, "posting", a.Labels["job"])
				return a.State
			}
		}
		return ""
	}
	// Scraped and evaluated with the pooler up: quiet.
	require.Eventually(t, func() bool {
		var up struct {
			Result []json.RawMessage `json:"result"`
		}
		require.NoError(t, json.Unmarshal(promAPI(t, base, "/api/v1/query",
			url.Values{"query": {`posting_dependency_up{dependency="database"} == 1`}}), &up))
		return len(up.Result) == 1
	}, 30*time.Second, 200*time.Millisecond, "the database check never scraped up")
	require.Empty(t, state())

	bouncer.Stop()
	require.Eventually(t, func() bool { return state() == "pending" }, 30*time.Second, 200*time.Millisecond,
		"PostingDatabaseUnreachable never became pending with the pooler down")
	bouncer.Restart(t)
	require.Eventually(t, func() bool { return state() == "" }, 30*time.Second, 200*time.Millisecond,
		"PostingDatabaseUnreachable stayed with the pooler back")
}
