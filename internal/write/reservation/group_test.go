package reservation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// groupedService is a Service whose one committer waits long enough for
// every create of a test to join its group.
func groupedService(t *testing.T, db *database.DB) *reservation.Service {
	t.Helper()
	svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{GroupCommitters: 1, GroupWait: reservation.MaxGroupWait})
	require.NoError(t, err)
	return svc
}

// atOnce runs fn(0)..fn(n-1) at once and returns when each has.
func atOnce(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// postTransactions returns, on PostgreSQL, how many transactions last
// wrote the posts ids (their distinct xmin); elsewhere -1.
func postTransactions(t *testing.T, db *database.DB, ids []int64) int {
	t.Helper()
	if db.Dialect != database.PostgreSQL {
		return -1
	}
	var txs []string
	require.NoError(t, db.Raw("SELECT DISTINCT xmin::text FROM posts WHERE id IN ?", ids).Scan(&txs).Error)
	return len(txs)
}

// createAll runs one create per title at once and returns each one's post
// and error, in the order of titles.
func createAll(svc *reservation.Service, owners, titles []string) ([]*reservation.Post, []error) {
	posts, errs := make([]*reservation.Post, len(titles)), make([]error, len(titles))
	atOnce(len(titles), func(i int) {
		ctx := reservation.WithScope(context.Background(), reservation.Scope{OwnerID: owners[i%len(owners)]})
		posts[i], errs[i] = svc.Create(ctx, reservation.CreateInput{Title: titles[i], Content: "c", ScheduledAt: time.Now().Add(time.Hour)})
	})
	return posts, errs
}

// Concurrent creates share one transaction, each post its own owner's with
// its CREATED event; on PostgreSQL the posts carry fewer transaction ids
// (xmin) than there are posts.
func TestGroupedCreatesCommitInOneTransaction(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc := groupedService(t, db)
		titles := make([]string, 12)
		for i := range titles {
			titles[i] = fmt.Sprint("post ", i)
		}
		posts, errs := createAll(svc, []string{"alice", "bob"}, titles)
		var ids []int64
		for i := range titles {
			require.NoError(t, errs[i])
			ids = append(ids, posts[i].ID)
			stored := loadPost(t, db.DB, posts[i].ID)
			require.Equal(t, titles[i], stored.Title)
			require.Equal(t, posts[i].OwnerID, stored.OwnerID)
			var events []outbox.Message
			require.NoError(t, db.Where("aggregate_id = ?", posts[i].ID).Find(&events).Error)
			require.Len(t, events, 1)
			var payload struct{ Action, OwnerID string }
			require.NoError(t, json.Unmarshal([]byte(events[0].Payload), &payload))
			require.Equal(t, "CREATED", payload.Action)
			require.Equal(t, stored.OwnerID, payload.OwnerID)
		}
		if txs := postTransactions(t, db, ids); txs >= 0 {
			require.Less(t, txs, len(titles), "creates shared transactions")
		}
	})
}

// A create that fails inside its group (here a constraint the test adds
// refuses its title) fails alone: the others of the group are written.
func TestGroupedCreateThatFailsFailsAlone(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		if db.Dialect == database.SQLite {
			require.NoError(t, db.Exec("CREATE TRIGGER poison BEFORE INSERT ON posts WHEN NEW.title = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END").Error)
		} else {
			require.NoError(t, db.Exec("ALTER TABLE posts ADD CONSTRAINT ck_test_poison CHECK (title <> 'poison')").Error)
		}
		svc := groupedService(t, db)
		titles := []string{"a", "b", "poison", "c", "d"}
		posts, errs := createAll(svc, []string{"alice"}, titles)
		for i, title := range titles {
			if title == "poison" {
				require.Error(t, errs[i])
				continue
			}
			require.NoError(t, errs[i], title)
			require.Equal(t, title, loadPost(t, db.DB, posts[i].ID).Title)
		}
		var n, events int64
		require.NoError(t, db.Model(&reservation.Post{}).Count(&n).Error)
		require.NoError(t, db.Model(&outbox.Message{}).Count(&events).Error)
		require.EqualValues(t, 4, n)
		require.EqualValues(t, 4, events)
	})
}

// A group refused at its commit (here by a deferred constraint trigger that
// refuses one create's title) is written again one create a transaction:
// the database answered, so nothing of the group was stored, and the
// refused create fails alone.
func TestGroupRefusedAtCommitIsWrittenAgainOneByOne(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.PostgreSQL)
	require.NoError(t, db.Exec(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.title = 'poison' THEN RAISE EXCEPTION 'poison'; END IF; RETURN NULL; END $$`).Error)
	require.NoError(t, db.Exec(`CREATE CONSTRAINT TRIGGER poison AFTER INSERT ON posts DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION refuse_poison()`).Error)
	svc := groupedService(t, db)
	titles := []string{"a", "poison", "b", "c"}
	posts, errs := createAll(svc, []string{"alice"}, titles)
	for i, title := range titles {
		if title == "poison" {
			require.ErrorContains(t, errs[i], "poison")
			continue
		}
		require.NoError(t, errs[i], title)
		require.Equal(t, title, loadPost(t, db.DB, posts[i].ID).Title)
	}
	var n int64
	require.NoError(t, db.Model(&reservation.Post{}).Count(&n).Error)
	require.EqualValues(t, 3, n, "each create once")
}
