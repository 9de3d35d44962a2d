package reservation

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// A change of a post whose row another transaction holds (a series edit,
// a peer's group, a stalled session) does not hold up its group: the
// group's create is answered while the row stays locked, and the change,
// written alone once the row is free, succeeds.
func TestGroupedChangeOfALockedPostDoesNotHoldUpItsGroup(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc, held, release := heldPost(t, db)

		var created *Post
		answers := startQueued(t, svc,
			func() error {
				_, err := svc.Update(context.Background(), held.ID, UpdateInput{Title: new("edited")})
				return err
			},
			func() (err error) {
				created, err = svc.Create(context.Background(), CreateInput{Title: "new", Content: "c", ScheduledAt: svc.now().Add(time.Hour)})
				return err
			})
		select {
		case err := <-answers[1]:
			require.NoError(t, err)
			require.NotNil(t, created)
		case <-time.After(20 * time.Second):
			t.Fatal("the create waited for the row of its group's change, held by another transaction")
		}
		release()
		require.NoError(t, <-answers[0])
		stored, err := postByID(db.DB, held.ID)
		require.NoError(t, err)
		require.Equal(t, "edited", stored.Title)
		require.EqualValues(t, 2, stored.Version.Int64)
	})
}

// A change alone in its group, of a post whose row another transaction
// holds, waits for it without holding a committer's place: a create that
// comes meanwhile is written.
func TestLoneChangeOfALockedPostLeavesTheCommitterFree(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc, held, release := heldPost(t, db)

		edited := make(chan error, 1)
		go func() {
			_, err := svc.Cancel(context.Background(), held.ID)
			edited <- err
		}()
		require.Eventually(t, func() bool { return lockWaiters(t, db) > 0 }, 10*time.Second, time.Millisecond,
			"the cancel waits for the row")
		created := make(chan error, 1)
		go func() {
			_, err := svc.Create(context.Background(), CreateInput{Title: "new", Content: "c", ScheduledAt: svc.now().Add(time.Hour)})
			created <- err
		}()
		select {
		case err := <-created:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the create waited for a committer's place held by a change waiting for its row")
		}
		release()
		require.NoError(t, <-edited)
		stored, err := postByID(db.DB, held.ID)
		require.NoError(t, err)
		require.Equal(t, StatusCancelled, stored.Status)
	})
}

// heldPost returns a grouped Service on db (one committer), a post written
// through it, and release, which ends the transaction of another session
// that holds the post's row (FOR UPDATE) meanwhile; the test's end releases
// it too. SQLite, whose one writer holds no row, skips the test.
func heldPost(t *testing.T, db *database.DB) (*Service, *Post, func()) {
	t.Helper()
	if db.Dialect == database.SQLite {
		t.Skip("SQLite has one writer at a time: no row is held by another")
	}
	svc, err := NewService(db.DB, ServiceConfig{GroupCommitters: 1})
	require.NoError(t, err)
	held, err := svc.Create(context.Background(), CreateInput{Title: "held", Content: "c", ScheduledAt: svc.now().Add(time.Hour)})
	require.NoError(t, err)
	holder := db.DB.Begin()
	require.NoError(t, holder.Error)
	var id int64
	require.NoError(t, holder.Raw("SELECT id FROM posts WHERE id = ? FOR UPDATE", held.ID).Scan(&id).Error)
	release := sync.OnceFunc(func() { holder.Rollback() })
	t.Cleanup(release)
	return svc, held, release
}

// lockWaiters is how many sessions of db's database wait for a lock: on
// MySQL, that run an UPDATE (a test's only one waits for its row; MariaDB's
// innodb_trx does not always tell LOCK WAIT).
func lockWaiters(t *testing.T, db *database.DB) int {
	t.Helper()
	var n int
	q := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
	if db.Dialect == database.MySQL {
		q = `SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() AND command = 'Query' AND info LIKE 'UPDATE%'`
	}
	require.NoError(t, db.Raw(q).Scan(&n).Error)
	return n
}
