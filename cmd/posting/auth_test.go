package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/write/auth"
)

const cliSecret = "cli-test-secret-cli-test-secret-0123"

// The safe default: no key, no POSTING_AUTH_DISABLED and a non-loopback
// POSTING_HTTP_ADDR stop serve with exit status 2 and a message naming the
// settings, before anything is opened (the data dir stays empty).
func TestServeRefusesAnOpenAPIOnTheNetwork(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":8080", "[::]:0", "192.0.2.1:8080", "example.com:80"} {
		dir := filepath.Join(t.TempDir(), "data")
		_, stderr, code := runCLI(t, "serve", "--http-addr", addr, "--data-dir", dir)
		require.Equal(t, exitUsage, code, "%s: %s", addr, stderr)
		for _, name := range []string{"POSTING_HTTP_ADDR=" + addr, "POSTING_AUTH_JWT_SECRET", "POSTING_AUTH_JWKS_URL", "POSTING_AUTH_DISABLED=true"} {
			require.Contains(t, stderr, name, addr)
		}
		_, err := os.Stat(dir)
		require.True(t, os.IsNotExist(err), "nothing created for %s", addr)
	}
	// The built binary exits 2 too, with the setting from the environment.
	out, code := runBinary(t, []string{"POSTING_HTTP_ADDR=0.0.0.0:0", "POSTING_DATA_DIR=" + t.TempDir()}, "serve")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "POSTING_HTTP_ADDR=0.0.0.0:0 is not a loopback address")
}

// Bad authentication settings exit 2 naming the setting; the secret's value
// is never printed.
func TestServeAuthSettingsRefused(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"short secret":         {[]string{"--auth-jwt-secret", "hunter2"}, "POSTING_AUTH_JWT_SECRET"},
		"relative jwks":        {[]string{"--auth-jwks-url", "/keys"}, `POSTING_AUTH_JWKS_URL="/keys"`},
		"http jwks, not local": {[]string{"--auth-jwks-url", "http://idp.example/keys"}, `POSTING_AUTH_JWKS_URL="http://idp.example/keys": must be https`},
		"disabled and secret":  {[]string{"--auth-disabled", "--auth-jwt-secret", cliSecret}, "POSTING_AUTH_DISABLED=true together with"},
		"issuer without a key": {[]string{"--auth-issuer", "https://idp.example"}, "POSTING_AUTH_ISSUER"},
		"bad write rate":       {[]string{"--api-write-rate", "fast"}, `POSTING_API_WRITE_RATE="fast"`},
		"zero write rate":      {[]string{"--api-write-rate", "0/s"}, `POSTING_API_WRITE_RATE="0/s"`},
		"sub-second window":    {[]string{"--api-write-rate", "5/100ms"}, `POSTING_API_WRITE_RATE="5/100ms"`},
	} {
		_, stderr, code := runCLI(t, append([]string{"serve", "--data-dir", t.TempDir()}, c.args...)...)
		require.Equal(t, exitUsage, code, "%s: %s", name, stderr)
		require.Contains(t, stderr, c.want, name)
		require.NotContains(t, stderr, "hunter2", name)
		require.NotContains(t, stderr, cliSecret, name)
	}
	for v, want := range map[string]string{"50/s": "50 per 1s", "600/m": "600 per 1m0s", "10/10s": "10 per 10s", "off": "0 per 0s"} {
		l, err := parseWriteRate(v)
		require.NoError(t, err, v)
		require.Equal(t, want, strings.Join([]string{itoa(l.Requests), "per", l.Window.String()}, " "), v)
	}
	require.True(t, loopback("127.0.0.1:8080"))
	require.True(t, loopback("localhost:8080"))
	require.True(t, loopback("[::1]:8080"))
	require.False(t, loopback(":8080"))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// posting token signs with the configured secret, issuer and audience, so
// serve's verifier accepts it; without a secret it exits 2 naming it.
func TestTokenCommand(t *testing.T) {
	t.Parallel()
	_, stderr, code := runCLI(t, "token", "--sub", "alice")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "POSTING_AUTH_JWT_SECRET")

	out, stderr, code := runCLI(t, "token", "--sub", "alice", "--scope", "posts:admin", "--ttl", "10m",
		"--auth-jwt-secret", cliSecret, "--auth-issuer", "https://idp.example", "--auth-audience", "posting")
	require.Equal(t, 0, code, stderr)
	v, err := auth.New(auth.Config{Secret: []byte(cliSecret), Issuer: "https://idp.example", Audience: "posting"})
	require.NoError(t, err)
	c, err := v.Verify(context.Background(), strings.TrimSpace(out))
	require.NoError(t, err)
	require.Equal(t, auth.Caller{Subject: "alice", Scopes: []string{auth.AdminScope}}, c)

	// The lifetime is --ttl: a verifier 11 minutes ahead refuses it.
	late, err := auth.New(auth.Config{Secret: []byte(cliSecret), Now: func() time.Time { return time.Now().Add(11 * time.Minute) }})
	require.NoError(t, err)
	_, err = late.Verify(context.Background(), strings.TrimSpace(out))
	require.ErrorContains(t, err, "expired")
}

// serve with a secret: /api/v1 answers 401 without a token and serves the
// token's subject with one; health stays open; the token is in no log line.
func TestServeWithSecretRequiresTokens(t *testing.T) {
	t.Parallel()
	httpAddr, kafkaAddr := freeAddr(t), freeAddr(t)
	logs := &logtest.Buffer{}
	runInProcess(t, logs, "serve", "--http-addr", httpAddr, "--embedded-kafka-addr", kafkaAddr, "--data-dir", t.TempDir(),
		"--auth-jwt-secret", cliSecret, "--instance-id", "auth-serve")
	require.Eventually(t, func() bool { code, _ := httpGet(httpAddr, "/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "serve never became ready: %s", logs)

	post := func(token string) (int, http.Header, map[string]any) {
		resp := sendRequest(t, http.MethodPost, "http://"+httpAddr+"/api/v1/posts", token,
			`{"title":"t","content":"c","scheduledAt":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(body, &m), string(body))
		return resp.StatusCode, resp.Header, m
	}
	code, h, _ := post("")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, `Bearer`, h.Get("WWW-Authenticate"))

	out, stderr, exit := runCLI(t, "token", "--sub", "alice", "--auth-jwt-secret", cliSecret)
	require.Equal(t, 0, exit, stderr)
	token := strings.TrimSpace(out)
	code, _, p := post(token)
	require.Equal(t, http.StatusCreated, code, p)
	require.Equal(t, "alice", p["ownerId"])
	require.NotContains(t, logs.String(), token)
	require.Contains(t, logs.String(), "the API requires bearer JWTs")
	require.NotContains(t, logs.String(), "unauthenticated")
}
