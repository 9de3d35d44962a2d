package outbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
)

// Announce belongs after the commit: inside a transaction it would make
// that transaction's commit take PostgreSQL's notification lock, so it is
// refused there, and the transaction is left to its caller.
func TestAnnounceRefusesToRunInsideATransaction(t *testing.T) {
	t.Parallel()
	db := databasetest.NewPostgres(t)
	require.NoError(t, outbox.Announce(db.DB))
	err := database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
		return outbox.Announce(tx)
	})
	require.ErrorIs(t, err, outbox.ErrAnnounceInTransaction)
	// MySQL and SQLite have no signal: nothing to send, nothing refused.
	require.NoError(t, outbox.Announce(databasetest.NewSQLite(t).DB))
}
