package overdue_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/operate/overdue/overduetest"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A post the worker publishes while List reads it (the post read WORKING,
// then post and publication settled in one transaction, then the
// publication read PUBLISHED) is not listed as stuck with its publication
// settled: it is no longer overdue. The hook makes the interleaving happen
// on every run. Not parallel: the hook is the package's.
func TestListLeavesOutAPostPublishedWhileItWasRead(t *testing.T) {
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := overduetest.Seed(t, db)
		var pending int64
		for i, r := range f.Reasons {
			if r == overdue.ReasonPublicationPending {
				pending = f.Overdue[i]
			}
		}
		require.NotZero(t, pending)
		overdue.SetTestHookBeforeExplain(t.Cleanup, func() {
			require.NoError(t, db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Model(&reservation.Post{}).Where("id = ?", pending).
					Update("status", reservation.StatusPublished).Error; err != nil {
					return err
				}
				return tx.Model(&worker.Publication{}).Where("post_id = ?", pending).
					Update("status", worker.PublicationPublished).Error
			}))
		})

		posts, _, err := overdue.List(t.Context(), db.DB, overduetest.Grace, 100)
		require.NoError(t, err)
		for _, p := range posts {
			require.NotEqual(t, pending, p.ID, "post %d was published while it was read; listed as %s", p.ID, p.Reason)
		}
		require.Len(t, posts, len(f.Overdue)-1, "every other overdue post is still listed")
	})
}
