package reservation_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A series spends one write per post of its first horizon whenever that
// begins: one that starts beyond the horizon spends what it makes once its
// start comes within reach, as one starting now spends what it makes now.
func TestSeriesStartingBeyondTheHorizonSpendsItsFirstHorizonOfPosts(t *testing.T) {
	t.Parallel()
	db := databasetest.New(t, database.SQLite)
	clock := clocktest.New(instant("2027-03-24T12:00:00Z"))
	svc := newSeriesService(t, db.DB, clock, nil)
	var spent []int
	ctx := reservation.WithCharge(context.Background(), func(n int) error {
		spent = append(spent, n)
		return nil
	})
	near, err := svc.CreateSeries(ctx, reservation.SeriesInput{Title: "near", Content: "c", TimeZone: "UTC",
		Start: local("2027-03-25T00:00:00"), RRule: "FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19;COUNT=20"})
	require.NoError(t, err)
	far, err := svc.CreateSeries(ctx, reservation.SeriesInput{Title: "far", Content: "c", TimeZone: "UTC",
		Start: local("2027-04-25T00:00:00"), RRule: "FREQ=DAILY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19;COUNT=20"})
	require.NoError(t, err)
	clock.Set(instant("2027-04-24T12:00:00Z"))
	_, err = svc.MaterializeSeries(context.Background(), 100)
	require.NoError(t, err)
	for _, id := range []int64{near.ID, far.ID} {
		var n int64
		require.NoError(t, db.Model(&reservation.Post{}).Where("series_id = ?", id).Count(&n).Error)
		require.EqualValues(t, 20, n)
	}
	require.Equal(t, []int{20, 20}, spent, "each series spent its 20 posts")
}
