package main

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

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
