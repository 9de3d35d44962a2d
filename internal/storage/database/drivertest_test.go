package database_test

import (
	"testing"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/drivertest"
)

// Every database's Driver passes the driver suite, on a real server.
func TestDriversPassTheDriverSuite(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		drivertest.Run(t, db)
	})
}
