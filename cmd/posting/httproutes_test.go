package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requestsCounted is the value of posting_http_requests_total for route and
// code in a scrape, "" when the series is absent.
func requestsCounted(scrape, route, code string) string {
	re := regexp.MustCompile(`(?m)^posting_http_requests_total\{code="` + code + `",instance_id="[^"]*",route="` +
		regexp.QuoteMeta(route) + `"\} (\S+)$`)
	if m := re.FindStringSubmatch(scrape); m != nil {
		return m[1]
	}
	return ""
}

// The handler serve runs counts every request under the pattern it matched
// (whatever the answer: 201, 401, 200), and under "unmatched" only what no
// route matches.
func TestServeCountsRequestsByMatchedRoute(t *testing.T) {
	t.Parallel()
	addr := serveInProcess(t, "--auth-jwt-secret", cliSecret, "--admin-token", strings.Repeat("k", 32))
	out, stderr, exit := runCLI(t, "token", "--sub", "alice", "--auth-jwt-secret", cliSecret)
	require.Equal(t, 0, exit, stderr)
	do := func(method, path, token, body string) int {
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	require.Equal(t, 201, do("POST", "/api/v1/posts", strings.TrimSpace(out), `{"title":"t","content":"c","scheduledAt":"`+at+`"}`))
	require.Equal(t, 401, do("POST", "/api/v1/posts", "", `{}`))
	require.Equal(t, 401, do("GET", "/admin/outbox/stats", "wrong", ""))
	require.Equal(t, 200, do("GET", "/healthz", "", ""))
	require.Equal(t, 404, do("GET", "/nowhere", "", ""))

	m := scrape(t, addr)
	for _, c := range []struct{ route, code string }{
		{"POST /api/v1/posts", "201"},
		{"POST /api/v1/posts", "401"},
		{"GET /admin/outbox/stats", "401"},
		{"GET /healthz", "200"},
		{"unmatched", "404"},
	} {
		require.Equal(t, "1", requestsCounted(m, c.route, c.code), "%s %s in:\n%s", c.route, c.code, m)
	}
	require.Regexp(t, `(?m)^posting_admin_auth_failures_total\{instance_id="[^"]*",outcome="invalid"\} 1$`, m)
	require.Empty(t, requestsCounted(m, "unmatched", "201"))
	require.Empty(t, requestsCounted(m, "unmatched", "401"))
}
