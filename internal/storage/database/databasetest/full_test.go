package databasetest

import (
	"errors"
	"fmt"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A full server (MySQL 1040, PostgreSQL 53300, wrapped or only as text) is
// waited for; any other error ends the wait at once.
func TestWhileFullWaitsForRoomOnlyOnAFullServer(t *testing.T) {
	t.Parallel()
	for _, full := range []error{
		&mysqldriver.MySQLError{Number: 1040, Message: "Too many connections"},
		fmt.Errorf("connect: %w", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}),
		errors.New("apply mysql migrations: failed to initialize: Error 1040: Too many connections"),
	} {
		calls := 0
		err := whileFull(func() error {
			calls++
			if calls < 3 {
				return full
			}
			return nil
		})
		require.NoError(t, err, "%v", full)
		require.Equal(t, 3, calls, "%v", full)
	}
	calls := 0
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	require.ErrorIs(t, whileFull(func() error { calls++; return refused }), refused)
	require.Equal(t, 1, calls, "an unreachable server is not waited for")
}
