package reservation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/reservation"
)

// TestCreateWritesTheRowGORMWrites: the hand-built INSERT of Create writes,
// column by column, the row tx.Create writes for the same post, for a title
// with quotes, a backslash, a placeholder mark, SQL comment marks and
// characters outside the BMP, and with the nullable fields left nil (NULL,
// not a zero value) and OwnerID "" (an empty string, not NULL). A column
// the INSERT skipped or wrote differently, now or after a field is added to
// Post, makes the rows differ.
func TestCreateWritesTheRowGORMWrites(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		title := `it's "q" \ ? $1 -- /* */ ; é 😀 𝄞`
		at := svcStart.Add(time.Hour)
		got, err := e.svc.Create(ctx, reservation.CreateInput{Title: title, Content: "c\\n\x00?", ScheduledAt: at})
		if err != nil { // a NUL is refused by the rules: the content without it
			got, err = e.svc.Create(ctx, reservation.CreateInput{Title: title, Content: `c\n?`, ScheduledAt: at})
		}
		require.NoError(t, err)
		byGORM := reservation.Post{Title: got.Title, Content: got.Content, Status: got.Status, ScheduledAt: got.ScheduledAt,
			CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt, OwnerID: got.OwnerID, Traceparent: got.Traceparent,
			Version: optimisticlock.Version{Int64: 1, Valid: true}}
		require.NoError(t, e.db.Create(&byGORM).Error)

		row := func(id int64) map[string]any {
			m := map[string]any{}
			require.NoError(t, e.db.Table("posts").Where("id = ?", id).Take(&m).Error)
			delete(m, "id")
			return m
		}
		mine, theirs := row(got.ID), row(byGORM.ID)
		require.Equal(t, theirs, mine)
		require.Equal(t, title, mine["title"])
		require.Nil(t, mine["published_at"], "no publication time is NULL")
		require.NotNil(t, mine["owner_id"], `no owner is "", not NULL`)
	})
}
