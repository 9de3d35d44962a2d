package database_test

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// dsnOf parses a mysql:// URL into the driver config it becomes.
func dsnOf(t *testing.T, raw string) (*mysqldriver.Config, error) {
	t.Helper()
	cfg, _, err := dsnAndConfig(t, raw)
	return cfg, err
}

func dsnAndConfig(t *testing.T, raw string) (*mysqldriver.Config, string, error) {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	dsn, err := database.MySQLDSN(u)
	if err != nil {
		return nil, "", err
	}
	cfg, err := mysqldriver.ParseDSN(dsn)
	require.NoError(t, err, "the DSN the driver gets parses: %s", dsn)
	return cfg, dsn, nil
}

// The settings the service relies on are set, and the URL's parts land
// where they belong.
func TestMySQLDSNDefaults(t *testing.T) {
	t.Parallel()
	cfg, dsn, err := dsnAndConfig(t, "mysql://app:s%40cret@db.example:3307/posting")
	require.NoError(t, err)
	require.Equal(t, "app", cfg.User)
	require.Equal(t, "s@cret", cfg.Passwd)
	require.Equal(t, "tcp", cfg.Net)
	require.Equal(t, "db.example:3307", cfg.Addr)
	require.Equal(t, "posting", cfg.DBName)
	require.True(t, cfg.ParseTime)
	require.Equal(t, time.UTC, cfg.Loc)
	require.True(t, cfg.InterpolateParams)
	require.Equal(t, "'+00:00'", cfg.Params["time_zone"])
	require.Contains(t, dsn, "charset=utf8mb4") // the driver keeps it unexported
	require.Equal(t, 5*time.Second, cfg.Timeout)
	require.Equal(t, 30*time.Second, cfg.ReadTimeout)
	require.Equal(t, 30*time.Second, cfg.WriteTimeout)

	cfg, err = dsnOf(t, "mysql://root@localhost/posting")
	require.NoError(t, err)
	require.Equal(t, "localhost:3306", cfg.Addr, "the default port")
	require.Empty(t, cfg.Passwd)
}

// Other parameters reach the driver: its typed settings and session
// variables alike, and the overridable defaults can be overridden.
func TestMySQLDSNPassesParameters(t *testing.T) {
	t.Parallel()
	cfg, dsn, err := dsnAndConfig(t, "mysql://root@h/posting?timeout=2s&readTimeout=1m&writeTimeout=45s"+
		"&maxAllowedPacket=1048576&sql_mode=%27ANSI_QUOTES%27&charset=utf8&interpolateParams=false&tls=skip-verify")
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.Timeout)
	require.Equal(t, time.Minute, cfg.ReadTimeout)
	require.Equal(t, 45*time.Second, cfg.WriteTimeout)
	require.Equal(t, 1048576, cfg.MaxAllowedPacket)
	require.Equal(t, "'ANSI_QUOTES'", cfg.Params["sql_mode"])
	require.Contains(t, dsn, "charset=utf8&")
	require.NotContains(t, dsn, "utf8mb4")
	require.False(t, cfg.InterpolateParams)
	require.Equal(t, "skip-verify", cfg.TLSConfig)
	// The forced ones stay.
	require.True(t, cfg.ParseTime)
	require.Equal(t, time.UTC, cfg.Loc)
	require.Equal(t, "'+00:00'", cfg.Params["time_zone"])
}

// The time zone is UTC whatever the URL says: UTC spellings are accepted
// (and sent as '+00:00', which a server without time zone tables knows),
// any other zone is refused naming the parameter, and so is parseTime=false.
func TestMySQLDSNForcesUTC(t *testing.T) {
	t.Parallel()
	for _, q := range []string{
		"loc=UTC", "loc=utc", "loc=Etc%2FUTC", "parseTime=true", "parseTime=1",
		"time_zone=%27%2B00%3A00%27", "time_zone=%2B00:00", "time_zone=+00:00", "time_zone=UTC",
		"time_zone=%27UTC%27", "time_zone=%27-00:00%27", "loc=UTC&time_zone=%27%2B00%3A00%27",
	} {
		cfg, err := dsnOf(t, "mysql://root@h/posting?"+q)
		require.NoError(t, err, q)
		require.Equal(t, time.UTC, cfg.Loc, q)
		require.True(t, cfg.ParseTime, q)
		require.Equal(t, "'+00:00'", cfg.Params["time_zone"], q)
	}
	for q, name := range map[string]string{
		"loc=Local":                      "loc",
		"loc=Europe%2FParis":             "loc",
		"loc=America/New_York":           "loc",
		"time_zone=%27%2B02%3A00%27":     "time_zone",
		"time_zone=SYSTEM":               "time_zone",
		"time_zone=%27Europe%2FParis%27": "time_zone",
		"parseTime=false":                "parseTime",
		"parseTime=0":                    "parseTime",
		"parseTime=maybe":                "parseTime",
		"timeout=soon":                   "timeout",
	} {
		_, err := dsnOf(t, "mysql://root@h/posting?"+q)
		require.ErrorIs(t, err, database.ErrInvalidURL, q)
		require.ErrorContains(t, err, "mysql parameter "+name, q)
	}
}

// URLs the service cannot use are ErrInvalidURL, before any connection.
func TestOpenRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"oracle://u@h/db":                `scheme "oracle"`,
		"postgres://u@h":                 "exactly one database name",
		"postgresql://h/db?timezone=CET": "postgres parameter timezone",
		"posting.db":                     `scheme ""`,
		"mysql://host-only":              "exactly one database name",
		"mysql://h/a/b":                  "exactly one database name",
		"mysql:///db":                    "without host",
		"sqlite://":                      "sqlite URL without a path",
		"mysql://h/db?loc=Local":         "mysql parameter loc",
		"mysql://h/db?parseTime=off":     "mysql parameter parseTime",
		"mysql://h:3306/%zz":             "invalid URL escape",
	} {
		_, err := database.Open(raw, t.TempDir())
		require.ErrorIs(t, err, database.ErrInvalidURL, raw)
		require.ErrorContains(t, err, want, raw)
	}
	_, err := database.Open("", "")
	require.ErrorIs(t, err, database.ErrInvalidURL, "no URL and no data dir")
}

// A go-sql-driver DSN is refused with the URL form it should take; a URL
// that cannot be parsed is refused without its text, so its password
// appears in no message.
func TestOpenNamesTheURLFormAndHidesAnUnparseableURL(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"root@tcp(127.0.0.1:3306)/db", "u:canary-pw@tcp(h:3306)/db?parseTime=true", "tcp(h:3306)/db"} {
		_, err := database.Open(dsn, t.TempDir())
		require.ErrorIs(t, err, database.ErrInvalidURL, dsn)
		require.ErrorContains(t, err, "mysql://user:password@host:3306/db", dsn)
		require.NotContains(t, err.Error(), "canary-pw")
	}
	for _, raw := range []string{"mysql://u:canary-pw@h:3306/%zz", "postgres://u:canary-pw@[::1/db", "mysql://u:canary-pw@h:port/db",
		"postgres://u:canary-pw@h:5432/db\x7f\x00"} {
		_, err := database.Open(raw, t.TempDir())
		require.Error(t, err, raw)
		require.ErrorIs(t, err, database.ErrInvalidURL, raw)
		require.NotContains(t, err.Error(), "canary-pw", raw)
	}
}

// sqlite://relative/path is relative to the working directory (its first
// element parses as the URL's host), sqlite:///abs/path is absolute.
func TestSQLitePath(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"sqlite://posting.db":          "posting.db",
		"sqlite://data/posting.db":     "data/posting.db",
		"sqlite://./data/posting.db":   "./data/posting.db",
		"sqlite:///var/lib/posting.db": "/var/lib/posting.db",
		"sqlite:data/posting.db":       "data/posting.db",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		got, err := database.SQLitePath(u)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
}

// Open creates the file and its folders for a relative or an absolute URL,
// and says where it is.
func TestOpenSQLiteCreatesRelativeAndAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // no t.Parallel: the working directory is the process's

	rel := databasetest.Open(t, "sqlite://nested/dir/rel.db")
	require.Equal(t, "sqlite://nested/dir/rel.db", rel.Location)
	require.FileExists(t, filepath.Join(dir, "nested", "dir", "rel.db"))

	absPath := filepath.Join(t.TempDir(), "a", "abs.db")
	abs := databasetest.Open(t, "sqlite://"+absPath)
	require.Equal(t, "sqlite://"+absPath, abs.Location)
	require.FileExists(t, absPath)

	var mode string
	require.NoError(t, abs.Raw("PRAGMA journal_mode").Scan(&mode).Error)
	require.Equal(t, "wal", mode)

	emb, err := database.Open("", filepath.Join(dir, "data"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = emb.Close() })
	require.FileExists(t, filepath.Join(dir, "data", database.EmbeddedFileName))
}

// OpenExisting never creates a database: a missing file (embedded default or
// sqlite:// URL) is ErrNoDatabase naming its absolute path, and neither the
// file nor its folder appears. An existing file opens.
func TestOpenExistingDoesNotCreate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	_, err := database.OpenExisting("", dataDir)
	require.ErrorIs(t, err, database.ErrNoDatabase)
	require.ErrorContains(t, err, "no database at "+filepath.Join(dataDir, database.EmbeddedFileName)+
		"; run from the folder of `posting serve` or set --database-url / POSTING_DATABASE_URL")
	require.NoDirExists(t, dataDir)

	path := filepath.Join(dir, "sub", "x.db")
	_, err = database.OpenExisting("sqlite://"+path, "")
	require.ErrorIs(t, err, database.ErrNoDatabase)
	require.ErrorContains(t, err, "no database at "+path)
	require.NoDirExists(t, filepath.Join(dir, "sub"))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing created")

	db := databasetest.NewSQLite(t)
	existing, err := database.OpenExisting("sqlite://"+db.Location[len("sqlite://"):], "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = existing.Close() })
	require.True(t, existing.Migrator().HasTable("outbox"))
}

// A MySQL database that does not exist is ErrNoDatabase with the statement
// that creates it, rather than the server's bare "Unknown database".
func TestOpenMySQLUnknownDatabaseSaysCreateIt(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(databasetest.MySQLURL(t, "exists")) // skips without a server
	require.NoError(t, err)
	u.Path = "/newcomer_" + filepath.Base(t.TempDir())
	name := u.Path[1:]
	for _, open := range []func(string, string) (*database.DB, error){database.Open, database.OpenExisting} {
		_, err = open(u.String(), "")
		require.ErrorIs(t, err, database.ErrNoDatabase)
		require.ErrorContains(t, err, "CREATE DATABASE `"+name+"`")
		require.ErrorContains(t, err, "Unknown database", "the server's own words stay")
	}
}
