package reservation_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/write/reservation"
)

// Pages by scheduledAt, many posts sharing one scheduledAt (with
// microseconds) across several pages, and with the filters a caller
// combines with the order (status, owner, range), take every matching post
// once, in (scheduledAt, id) order.
func TestServiceListByScheduledAtPagesThroughTiesWithFilters(t *testing.T) {
	eachService(t, func(t *testing.T, e *serviceBundle) {
		ctx := context.Background()
		tie := svcStart.Add(36 * time.Hour).Truncate(time.Second).Add(654321 * time.Microsecond)
		owners := []string{"alice", "bob"}
		type made struct {
			id     int64
			at     time.Time
			owner  string
			status reservation.Status
		}
		var all []made
		for i := range 40 {
			at := tie
			switch i % 5 {
			case 3:
				at = tie.Add(-time.Microsecond)
			case 4:
				at = tie.Add(time.Microsecond)
			}
			owner := owners[i%2]
			p, err := e.svc.Create(reservation.WithScope(ctx, reservation.Scope{OwnerID: owner}),
				reservation.CreateInput{Title: fmt.Sprintf("tie %d", i), Content: "c", ScheduledAt: at})
			require.NoError(t, err)
			st := reservation.StatusReserved
			if i%3 == 0 {
				st = reservation.StatusCancelled
				e.setStatus(t, p.ID, st)
			}
			require.True(t, p.ScheduledAt.Equal(at))
			all = append(all, made{p.ID, at, owner, st})
		}
		slices.SortFunc(all, func(a, b made) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return int(a.id - b.id)
		})
		want := func(keep func(made) bool) []int64 {
			var ids []int64
			for _, m := range all {
				if keep(m) {
					ids = append(ids, m.id)
				}
			}
			return ids
		}
		alice := "alice"
		for _, tc := range []struct {
			name string
			q    reservation.ListQuery
			keep func(made) bool
		}{
			{"all", reservation.ListQuery{}, func(made) bool { return true }},
			{"status", reservation.ListQuery{Status: reservation.StatusReserved}, func(m made) bool { return m.status == reservation.StatusReserved }},
			{"owner", reservation.ListQuery{OwnerID: &alice}, func(m made) bool { return m.owner == alice }},
			{"owner and status", reservation.ListQuery{OwnerID: &alice, Status: reservation.StatusCancelled}, func(m made) bool {
				return m.owner == alice && m.status == reservation.StatusCancelled
			}},
			{"range", reservation.ListQuery{ScheduledFrom: tie, ScheduledTo: tie.Add(time.Microsecond)}, func(m made) bool { return m.at.Equal(tie) }},
			{"range and status", reservation.ListQuery{Status: reservation.StatusReserved, ScheduledFrom: tie, ScheduledTo: tie.Add(2 * time.Microsecond)}, func(m made) bool {
				return !m.at.Before(tie) && m.status == reservation.StatusReserved
			}},
		} {
			for _, limit := range []int{1, 3, 7} {
				q := tc.q
				q.Order, q.Limit = reservation.OrderByScheduledAt, limit
				got, _ := e.walkAll(t, q)
				require.Equal(t, want(tc.keep), got, "%s, limit %d", tc.name, limit)
			}
		}
		// A caller scoped to one owner pages through its own posts only.
		bob := reservation.WithScope(ctx, reservation.Scope{OwnerID: "bob"})
		var got []int64
		q := reservation.ListQuery{Order: reservation.OrderByScheduledAt, Limit: 4}
		for {
			page, err := e.svc.List(bob, q)
			require.NoError(t, err)
			for _, p := range page.Items {
				got = append(got, p.ID)
			}
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
		require.Equal(t, want(func(m made) bool { return m.owner == "bob" }), got)
	})
}

// walkAll is walk without its page bound.
func (e *serviceBundle) walkAll(t *testing.T, q reservation.ListQuery) (ids []int64, pages int) {
	t.Helper()
	for {
		page, err := e.svc.List(context.Background(), q)
		require.NoError(t, err)
		pages++
		for _, p := range page.Items {
			ids = append(ids, p.ID)
		}
		if page.NextCursor == "" {
			return ids, pages
		}
		q.Cursor = page.NextCursor
		require.Less(t, pages, 100, "pagination does not end")
	}
}
