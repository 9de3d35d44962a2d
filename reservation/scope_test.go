package reservation_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/reservation"
)

// A Scope in the context makes the caller the owner of what it creates and
// hides every other owner's post (ErrNotFound, nothing written); All sees
// every post; no Scope is the service itself. Each event carries the
// post's owner.
func TestScopeOwnsAndHides(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		bg := context.Background()
		alice := reservation.WithScope(bg, reservation.Scope{OwnerID: "alice"})
		bob := reservation.WithScope(bg, reservation.Scope{OwnerID: "bob"})
		admin := reservation.WithScope(bg, reservation.Scope{OwnerID: "root", All: true})
		in := reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: svcStart.Add(time.Hour)}
		a, err := e.svc.Create(alice, in)
		require.NoError(t, err)
		require.Equal(t, "alice", a.OwnerID)
		b, err := e.svc.Create(bob, in)
		require.NoError(t, err)
		anon, err := e.svc.Create(bg, in)
		require.NoError(t, err)
		require.Equal(t, "", anon.OwnerID)
		require.Equal(t, "bob", e.load(t, b.ID).OwnerID)

		_, err = e.svc.Get(alice, b.ID)
		require.ErrorIs(t, err, reservation.ErrNotFound)
		title := "x"
		_, err = e.svc.Update(alice, b.ID, reservation.UpdateInput{Title: &title})
		require.ErrorIs(t, err, reservation.ErrNotFound)
		_, err = e.svc.Cancel(alice, b.ID)
		require.ErrorIs(t, err, reservation.ErrNotFound)
		require.Equal(t, reservation.StatusReserved, e.load(t, b.ID).Status)
		require.EqualValues(t, 1, e.load(t, b.ID).Version.Int64)

		ids := func(ctx context.Context, q reservation.ListQuery) []int64 {
			page, err := e.svc.List(ctx, q)
			require.NoError(t, err)
			out := []int64{}
			for _, p := range page.Items {
				out = append(out, p.ID)
			}
			return out
		}
		require.Equal(t, []int64{a.ID}, ids(alice, reservation.ListQuery{}))
		require.Equal(t, []int64{a.ID, b.ID, anon.ID}, ids(admin, reservation.ListQuery{}))
		require.Equal(t, []int64{a.ID, b.ID, anon.ID}, ids(bg, reservation.ListQuery{}))
		bobID, none := "bob", ""
		require.Equal(t, []int64{b.ID}, ids(admin, reservation.ListQuery{OwnerID: &bobID}))
		require.Equal(t, []int64{anon.ID}, ids(admin, reservation.ListQuery{OwnerID: &none}))
		require.Empty(t, ids(alice, reservation.ListQuery{OwnerID: &bobID}), "a filter never widens the scope")

		_, err = e.svc.Cancel(admin, b.ID)
		require.NoError(t, err)
		var rows []outbox.Message
		require.NoError(t, e.db.Where("aggregate_id = ?", b.ID).Order("id").Find(&rows).Error)
		require.Len(t, rows, 2)
		for _, m := range rows {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(m.Payload), &v))
			require.Equal(t, "bob", v["ownerId"], "the owner, also for an admin's change")
		}
	})
}
