package database_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

// The URL's parts land where pgx wants them, sessions run in UTC, and the
// parameters the service does not set are passed through.
func TestPostgresConfig(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"postgres", "postgresql"} {
		u, err := url.Parse(scheme + "://app:s%40cret@db.example:5433/posting?sslmode=disable&application_name=posting&statement_timeout=30000")
		require.NoError(t, err)
		cfg, err := database.PostgresConfig(u)
		require.NoError(t, err)
		require.Equal(t, "db.example", cfg.Host)
		require.EqualValues(t, 5433, cfg.Port)
		require.Equal(t, "app", cfg.User)
		require.Equal(t, "s@cret", cfg.Password)
		require.Equal(t, "posting", cfg.Database)
		require.Nil(t, cfg.TLSConfig, "sslmode=disable is honoured")
		require.Equal(t, "UTC", cfg.RuntimeParams["timezone"])
		require.Equal(t, "posting", cfg.RuntimeParams["application_name"])
		require.Equal(t, "30000", cfg.RuntimeParams["statement_timeout"])
		require.Equal(t, 5*time.Second, cfg.ConnectTimeout)
	}

	u, _ := url.Parse("postgres://root@localhost/posting?connect_timeout=2&timezone=UTC")
	cfg, err := database.PostgresConfig(u)
	require.NoError(t, err)
	require.EqualValues(t, 5432, cfg.Port, "the default port")
	require.Equal(t, 2*time.Second, cfg.ConnectTimeout)
	require.Equal(t, "UTC", cfg.RuntimeParams["timezone"])
}

func TestPostgresConfigRefuses(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"postgres:///posting":                            "without host",
		"postgres://h:5432":                              "database name",
		"postgres://h:5432/a/b":                          "database name",
		"postgres://h/posting?timezone=Europe/Paris":     "timezone=Europe/Paris",
		"postgres://h/posting?TimeZone=America/New_York": "TimeZone=America/New_York",
		"postgres://h/posting?sslmode=sometimes":         "sslmode",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		_, err = database.PostgresConfig(u)
		require.ErrorIs(t, err, database.ErrInvalidURL, raw)
		require.ErrorContains(t, err, want, raw)
	}
}

// A URL without a port names the database with the default one, so the
// same database always has the same name (logs, the embedded broker's
// record of its database); credentials are left out.
func TestOpenPostgresLocation(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(databasetest.PostgresURL(t, "where")) // skips without a server
	require.NoError(t, err)
	if u.Port() != "5432" {
		t.Skipf("the test server is not on the default port: %s", u.Host)
	}
	u.Host = u.Hostname()
	u.User = url.UserPassword(u.User.Username(), "secret")
	db, err := database.Open(u.String(), "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.Equal(t, database.PostgreSQL, db.Dialect)
	require.Equal(t, "postgres://"+u.Hostname()+":5432"+u.Path, db.Location)
}
