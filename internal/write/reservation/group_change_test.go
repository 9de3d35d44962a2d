package reservation_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// change is one Update (title set) or Cancel (title empty) of a post.
type change struct {
	id    int64
	title string
}

// changeAll runs the changes at once, each as alice, and returns each
// one's post and error, in order.
func changeAll(svc *reservation.Service, changes []change) ([]*reservation.Post, []error) {
	posts, errs := make([]*reservation.Post, len(changes)), make([]error, len(changes))
	atOnce(len(changes), func(i int) {
		c := changes[i]
		ctx := reservation.WithScope(context.Background(), reservation.Scope{OwnerID: "alice"})
		if c.title == "" {
			posts[i], errs[i] = svc.Cancel(ctx, c.id)
			return
		}
		posts[i], errs[i] = svc.Update(ctx, c.id, reservation.UpdateInput{Title: &c.title})
	})
	return posts, errs
}

// createPosts creates n posts of alice through svc, one after the other.
func createPosts(t *testing.T, svc *reservation.Service, n int) []*reservation.Post {
	t.Helper()
	titles := make([]string, n)
	for i := range titles {
		titles[i] = fmt.Sprint("post ", i)
	}
	posts, errs := createAll(svc, []string{"alice"}, titles)
	for _, err := range errs {
		require.NoError(t, err)
	}
	return posts
}

// actions returns the actions of the POSTING_EVENTs of post id, in order.
func actions(t *testing.T, db *database.DB, id int64) []string {
	t.Helper()
	var events []outbox.Message
	require.NoError(t, db.Where("aggregate_id = ?", id).Order("id").Find(&events).Error)
	var out []string
	for _, e := range events {
		var payload struct{ Action string }
		require.NoError(t, json.Unmarshal([]byte(e.Payload), &payload))
		out = append(out, payload.Action)
	}
	return out
}

// Concurrent updates and cancels share one transaction, each with its event
// after its post's CREATED; on PostgreSQL the changed posts carry fewer
// transaction ids (xmin) than there were changes.
func TestGroupedChangesCommitInOneTransaction(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc := groupedService(t, db)
		created := createPosts(t, svc, 10)
		changes := make([]change, len(created))
		for i, p := range created {
			changes[i] = change{id: p.ID, title: fmt.Sprint("changed ", i)}
			if i%3 == 0 {
				changes[i].title = "" // cancel
			}
		}
		posts, errs := changeAll(svc, changes)
		var ids []int64
		for i, c := range changes {
			require.NoError(t, errs[i])
			stored := loadPost(t, db.DB, c.id)
			require.EqualValues(t, 2, stored.Version.Int64)
			require.Equal(t, stored.Version, posts[i].Version, "the answer carries the stored version")
			if c.title == "" {
				require.Equal(t, reservation.StatusCancelled, stored.Status)
				require.Equal(t, []string{"CREATED", "CANCELLED"}, actions(t, db, c.id))
			} else {
				require.Equal(t, c.title, stored.Title)
				require.Equal(t, c.title, posts[i].Title)
				require.Equal(t, []string{"CREATED", "UPDATED"}, actions(t, db, c.id))
			}
			ids = append(ids, c.id)
		}
		if txs := postTransactions(t, db, ids); txs >= 0 {
			require.Less(t, txs, len(changes), "changes shared transactions")
		}
	})
}

// A change the database refuses inside its group (here a constraint the
// test adds refuses its title) fails alone: the group is written again one
// change a transaction, and every other change is written once.
func TestGroupedChangeThatFailsFailsAlone(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		svc := groupedService(t, db)
		created := createPosts(t, svc, 5)
		if db.Dialect == database.SQLite {
			require.NoError(t, db.Exec("CREATE TRIGGER poison BEFORE UPDATE ON posts WHEN NEW.title = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END").Error)
		} else {
			require.NoError(t, db.Exec("ALTER TABLE posts ADD CONSTRAINT ck_test_poison CHECK (title <> 'poison')").Error)
		}
		changes := []change{{created[0].ID, "a"}, {created[1].ID, "poison"}, {created[2].ID, ""}, {created[3].ID, "b"}, {created[4].ID, "c"}}
		_, errs := changeAll(svc, changes)
		for i, c := range changes {
			stored := loadPost(t, db.DB, c.id)
			switch c.title {
			case "poison":
				require.Error(t, errs[i])
				require.False(t, errors.Is(errs[i], reservation.ErrConflict), "%v", errs[i])
				require.Equal(t, created[1].Title, stored.Title)
				require.Equal(t, []string{"CREATED"}, actions(t, db, c.id))
			case "":
				require.NoError(t, errs[i])
				require.Equal(t, reservation.StatusCancelled, stored.Status)
				require.Equal(t, []string{"CREATED", "CANCELLED"}, actions(t, db, c.id))
			default:
				require.NoError(t, errs[i], c.title)
				require.Equal(t, c.title, stored.Title)
				require.Equal(t, []string{"CREATED", "UPDATED"}, actions(t, db, c.id))
			}
		}
	})
}
