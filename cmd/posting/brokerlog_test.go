package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/database"
)

// The embedded broker's log belongs to the database it was written for:
// serve on the same data dir with another POSTING_DATABASE_URL stops with
// exit status 2, saying whose log it is and how to go on; the first database
// still starts.
func TestServeRefusesBrokerLogOfAnotherDatabase(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	env := []string{"POSTING_DATA_DIR=" + dataDir, "POSTING_HTTP_ADDR=" + freeAddr(t),
		"POSTING_EMBEDDED_KAFKA_ADDR=" + freeAddr(t)}
	startServe(t, env...).Terminate(t)

	other := filepath.Join(t.TempDir(), "other.db")
	out, code := runBinary(t, append(env, "POSTING_DATABASE_URL=sqlite://"+other), "serve")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "belongs to database sqlite://<data dir>/posting.db, not sqlite://"+other)
	require.Contains(t, out, "Use another POSTING_DATA_DIR")
	require.Contains(t, out, "delete "+filepath.Join(dataDir, "kafka"))
	require.NotContains(t, out, "http api listening")

	startServe(t, env...).Terminate(t)
}

// The name recorded for the broker's log holds no credentials, does not
// depend on how the data dir is spelled, and gives MySQL its default port.
func TestBrokerDatabaseName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := &settings{DataDir: dir}
	for _, c := range []struct {
		db   database.DB
		want string
	}{
		{database.DB{Dialect: database.SQLite, Location: "sqlite://" + filepath.Join(dir, "posting.db")}, "sqlite://<data dir>/posting.db"},
		{database.DB{Dialect: database.SQLite, Location: "sqlite://" + filepath.Join(dir, "..", filepath.Base(dir), "x", "p.db")}, "sqlite://<data dir>/x/p.db"},
		{database.DB{Dialect: database.SQLite, Location: "sqlite:///elsewhere/p.db"}, "sqlite:///elsewhere/p.db"},
		{database.DB{Dialect: database.MySQL, Location: "mysql://db1/posting"}, "mysql://db1:3306/posting"},
		{database.DB{Dialect: database.MySQL, Location: "mysql://db1:3307/posting"}, "mysql://db1:3307/posting"},
	} {
		require.Equal(t, c.want, brokerDatabase(s, &c.db), c.db.Location)
	}
}
