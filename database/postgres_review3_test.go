package database_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

// The parameters the service does not set reach pgx as written, so they
// mean what they mean to pgx and libpq: %20 is a space
// (options=-c%20statement_timeout%3D5s is how a setting is passed), and a +
// is a plus, where url.Values would make a space of it. They used to go
// through url.Values.Encode, whose + for a space pgx reads as a plus.
func TestPostgresConfigKeepsSpacesAndPluses(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("postgres://app@db.example/posting?application_name=posting%20relay&options=-c%20statement_timeout%3D5s&search_path=a+b%2Bc&TimeZone=UTC")
	require.NoError(t, err)
	cfg, err := database.PostgresConfig(u)
	require.NoError(t, err)
	require.Equal(t, "posting relay", cfg.RuntimeParams["application_name"])
	require.Equal(t, "-c statement_timeout=5s", cfg.RuntimeParams["options"])
	require.Equal(t, "a+b+c", cfg.RuntimeParams["search_path"])
	require.Equal(t, "UTC", cfg.RuntimeParams["timezone"])
	require.NotContains(t, cfg.RuntimeParams, "TimeZone")
	direct, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	for _, k := range []string{"application_name", "options", "search_path"} {
		require.Equal(t, direct.RuntimeParams[k], cfg.RuntimeParams[k], k)
	}
}

// The same through a server: the session gets the setting that options
// names, where it failed to connect with `unrecognized configuration
// parameter "+statement_timeout"`.
func TestPostgresOptionsParameterReachesTheSession(t *testing.T) {
	t.Parallel()
	base := databasetest.URL(t, database.PostgreSQL, "options")
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	db, err := database.Open(base+sep+"options=-c%20statement_timeout%3D4321&application_name=posting%20review", "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var timeout, name string
	require.NoError(t, db.Raw("SHOW statement_timeout").Scan(&timeout).Error)
	require.NoError(t, db.Raw("SHOW application_name").Scan(&name).Error)
	require.Equal(t, "4321ms", timeout)
	require.Equal(t, "posting review", name)
}
