package database_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// burst takes every connection of db's pool at once, then gives them all
// back, rounds times: the load of as many concurrent requests as the pool
// allows, arriving in waves.
func burst(t *testing.T, db *database.DB, conns, rounds int) {
	t.Helper()
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	for range rounds {
		held := make([]*sql.Conn, 0, conns)
		for range conns {
			c, err := sqlDB.Conn(context.Background())
			require.NoError(t, err)
			require.NoError(t, c.PingContext(context.Background()))
			held = append(held, c)
		}
		for _, c := range held {
			require.NoError(t, c.Close())
		}
	}
}

func opened(t *testing.T, db *database.DB) int64 {
	t.Helper()
	s, err := db.PoolStats()
	require.NoError(t, err)
	return database.ConnectionsOpened(s)
}

// With its idle bound left at the default (the maximum), a pool under waves
// of load opens each connection once; with fewer kept idle it closes them
// after a wave and opens them again for the next, which the counter shows.
func TestPoolKeepsIdleAsManyAsItOpensByDefault(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		p, err := db.SetPool(database.Pool{MaxConns: 6})
		require.NoError(t, err)
		require.Equal(t, database.Pool{MaxConns: 6, MaxIdle: 6}, p)
		base := opened(t, db)
		burst(t, db, 6, 3)
		require.LessOrEqual(t, opened(t, db)-base, int64(6), "default pool reopened connections between waves")

		_, err = db.SetPool(database.Pool{MaxConns: 6, MaxIdle: 2})
		require.NoError(t, err)
		base = opened(t, db)
		burst(t, db, 6, 3)
		require.GreaterOrEqual(t, opened(t, db)-base, int64(4+4+4), "a pool keeping 2 idle reopens 4 per wave")
	})
}

func TestPoolDefaultsPerDialect(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	p, err := db.SetPool(database.Pool{})
	require.NoError(t, err)
	require.Equal(t, database.Pool{MaxConns: database.DefaultSQLiteMaxConns, MaxIdle: database.DefaultSQLiteMaxConns}, p)
	s, err := db.PoolStats()
	require.NoError(t, err)
	require.Equal(t, database.DefaultSQLiteMaxConns, s.MaxOpenConnections)

	my := databasetest.NewMySQL(t)
	p, err = my.SetPool(database.Pool{MaxIdle: 5})
	require.NoError(t, err)
	require.Equal(t, database.Pool{MaxConns: database.DefaultMaxConns, MaxIdle: 5}, p)
}

// A pool out of its limits is refused naming the field, and the pool in
// force is left as it was.
func TestPoolOutOfLimitsChangesNothing(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	_, err := db.SetPool(database.Pool{MaxConns: 3})
	require.NoError(t, err)
	for _, tc := range []struct {
		pool  database.Pool
		field string
	}{
		{database.Pool{MaxConns: -1}, "database.Pool.MaxConns"},
		{database.Pool{MaxConns: database.MaxPoolConns + 1}, "database.Pool.MaxConns"},
		{database.Pool{MaxIdle: -1}, "database.Pool.MaxIdle"},
		{database.Pool{MaxConns: 3, MaxIdle: 4}, "database.Pool.MaxIdle"},
	} {
		_, err := db.SetPool(tc.pool)
		var ce *config.Error
		require.ErrorAs(t, err, &ce, "%+v", tc.pool)
		require.Equal(t, tc.field, ce.Field)
		s, err := db.PoolStats()
		require.NoError(t, err)
		require.Equal(t, 3, s.MaxOpenConnections, "%+v", tc.pool)
	}
}
