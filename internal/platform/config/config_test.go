package config_test

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/config"
)

func TestErrorNamesFieldAndValue(t *testing.T) {
	t.Parallel()
	_, parseErr := strconv.Atoi("x")
	err := error(config.Invalid("relay.Config.BatchSize", 0, "want 1..%d", 5000))
	require.EqualError(t, err, "relay.Config.BatchSize 0: want 1..5000")
	require.EqualError(t, config.Invalid("worker.WebhookConfig.URL", "ftp://x", "want http or https"),
		`worker.WebhookConfig.URL "ftp://x": want http or https`)
	require.EqualError(t, config.Invalid("admin.Config.DB", nil, "must be set"), "admin.Config.DB must be set")

	wrapped := config.Invalid("kafka.ProducerConfig.KafkaVersion", "x", "%w", parseErr)
	require.ErrorIs(t, wrapped, parseErr, "the reason stays reachable")
	var ce *config.Error
	require.True(t, errors.As(errors.Join(errors.New("other"), wrapped), &ce))
	require.Equal(t, "kafka.ProducerConfig.KafkaVersion", ce.Field)
	require.Equal(t, "x", ce.Value)
}

func TestFillZeroTakesOnlyUnsetFields(t *testing.T) {
	t.Parallel()
	type cfg struct {
		N     int
		D     time.Duration
		S     string
		P     *int
		F     func() int
		L     []string
		zeros int
	}
	one, zero := 1, 0
	defaults := cfg{N: 5, D: time.Second, S: "s", P: &one, F: func() int { return 7 }, L: []string{"a"}, zeros: 9}

	var c cfg
	config.FillZero(&c, defaults)
	require.Equal(t, 5, c.N)
	require.Equal(t, time.Second, c.D)
	require.Equal(t, "s", c.S)
	require.Equal(t, 1, *c.P)
	require.Equal(t, 7, c.F())
	require.Equal(t, []string{"a"}, c.L)
	require.Zero(t, c.zeros, "unexported fields are left alone")

	c = cfg{N: -1, D: time.Minute, S: "t", P: &zero, F: func() int { return 8 }, L: []string{"b"}}
	config.FillZero(&c, defaults)
	require.Equal(t, -1, c.N)
	require.Equal(t, time.Minute, c.D)
	require.Equal(t, "t", c.S)
	require.Equal(t, 0, *c.P, "a pointer to zero is a setting, not unset")
	require.Equal(t, 8, c.F())
	require.Equal(t, []string{"b"}, c.L)
}

func TestCheckDurationsNamesTheFirstOutOfRange(t *testing.T) {
	t.Parallel()
	ds := []config.Duration{
		{Name: "DialTimeout", Value: time.Second, Min: time.Second, Max: time.Minute},
		{Name: "RetryMax", Value: 2 * time.Minute, Min: time.Second, Max: time.Minute},
		{Name: "ProbeTimeout", Value: 0, Min: time.Second, Max: time.Minute},
	}
	require.NoError(t, config.CheckDurations("x.Config.", ds[:1]), "the bounds are inclusive")
	err := config.CheckDurations("x.Config.", ds)
	require.EqualError(t, err, "x.Config.RetryMax 2m0s: want 1s to 1m0s")
	var ce *config.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 2*time.Minute, ce.Value)
}

func TestRedactURLHidesEverySecret(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"mysql://root:pw@127.0.0.1:3306/db":                       "mysql://root:xxxxx@127.0.0.1:3306/db",
		"root:pw@tcp(127.0.0.1:3306)/db":                          "root:xxxxx@tcp(127.0.0.1:3306)/db",
		"postgres://u@h/db?sslmode=disable&password=pw&sslkey=/k": "postgres://u@h/db?sslmode=disable&password=xxxxx&sslkey=xxxxx",
		"https://hooks.example.com/x?api_token=pw&a=1":            "https://hooks.example.com/x?api_token=xxxxx&a=1",
		"mysql://root:pw/x@127.0.0.1:3306/db":                     "(unparseable URL)",
		"amqp://guest:guest@127.0.0.1:5672/":                      "amqp://guest:xxxxx@127.0.0.1:5672/",
	} {
		require.Equal(t, want, config.RedactURL(raw), raw)
	}
}

func TestParseURLQuotesNothing(t *testing.T) {
	t.Parallel()
	_, err := config.ParseURL("mysql://root:secret-pw/x@127.0.0.1:3306/db")
	require.ErrorIs(t, err, config.ErrUnparseableURL)
	require.NotContains(t, err.Error(), "secret")
	require.Contains(t, err.Error(), "invalid port after host")
}

func TestRedactErrorHidesTheURLOfAURLError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("fetch: %w", &url.Error{Op: "Get", URL: "http://u:***@h/jwks?token=secret", Err: errors.New("connection refused")})
	require.Equal(t, `fetch: Get "http://u:xxxxx@h/jwks?token=xxxxx": connection refused`, config.RedactError(err))
	require.Equal(t, "plain", config.RedactError(errors.New("plain")))
}
