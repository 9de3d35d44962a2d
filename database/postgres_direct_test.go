package database_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
)

// openPostgres opens rawURL and closes it when the test ends.
func openPostgres(t *testing.T, rawURL string) *database.DB {
	t.Helper()
	db, err := database.Open(rawURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// A direct URL naming another database than the one the pool reaches (a
// typo, a staging copy on the same server) is refused when it is opened for
// migrations: applied there, they would leave the service's own database
// behind its code. The error names the setting and the database it reached.
func TestOpenDirectRefusesAnotherDatabase(t *testing.T) {
	t.Parallel()
	db := openPostgres(t, databasetest.PostgresURL(t, ""))
	other := databasetest.PostgresURL(t, "")
	require.NoError(t, db.SetDirectURL(other))

	direct, err := db.OpenDirect()
	if err == nil {
		_ = direct.Close()
	}
	require.ErrorIs(t, err, database.ErrInvalidURL)
	require.ErrorContains(t, err, "POSTING_DATABASE_DIRECT_URL")
	u, err2 := url.Parse(other)
	require.NoError(t, err2)
	require.ErrorContains(t, err, strings.TrimPrefix(u.Path, "/"))
}

// The direct URL of the pool's own database opens.
func TestOpenDirectOpensTheSameDatabase(t *testing.T) {
	t.Parallel()
	same := databasetest.PostgresURL(t, "")
	db := openPostgres(t, same)
	require.NoError(t, db.SetDirectURL(same))
	direct, err := db.OpenDirect()
	require.NoError(t, err)
	require.NotSame(t, db, direct)
	require.NoError(t, direct.Close())
}
