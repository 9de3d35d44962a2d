package databasetest

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// fullFor is how long a test waits for room on a test server that refuses
// connections because it holds as many as it allows.
const fullFor = 90 * time.Second

// serverFull reports whether err is a server refusing a connection for want
// of room: MySQL/MariaDB's 1040 (Too many connections) or PostgreSQL's
// 53300 (too many clients already). The tests of all packages share one
// server, and while several packages run at once their pools can briefly
// fill it; that is no failure of the test that happened to connect next.
// Errors that lost their type on the way (goose's) are matched by text.
func serverFull(err error) bool {
	var my *mysqldriver.MySQLError
	if errors.As(err, &my) && my.Number == 1040 {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "53300" {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "Error 1040") || strings.Contains(s, "SQLSTATE 53300")
}

// whileFull calls fn until it returns nil or an error other than a full
// server, waiting a little longer between calls, for at most fullFor; it
// returns fn's last error.
func whileFull(fn func() error) error {
	deadline := time.Now().Add(fullFor)
	wait := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !serverFull(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait/2 + rand.N(wait))
		wait = min(2*wait, 2*time.Second)
	}
}
