package reservation_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// The POSTING_EVENT of an occurrence carries seriesId and occurrence and
// keeps the AsyncAPI document's schema, as a plain post's does without
// them; a document that required neither or only one would fail here.
func TestOccurrenceEventsKeepTheAsyncAPISchema(t *testing.T) {
	t.Parallel()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.AsyncAPIDocument()))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	require.NoError(t, c.AddResource("asyncapi.json", doc))
	schema, err := c.Compile("asyncapi.json#/components/schemas/PostingEvent")
	require.NoError(t, err)

	db := databasetest.NewSQLite(t)
	clock := clocktest.New(instant("2027-03-25T00:00:00Z"))
	e := &seriesBundle{db: db, svc: newSeriesService(t, db.DB, clock, nil), clock: clock}
	ctx := context.Background()
	s, err := e.svc.CreateSeries(ctx, reservation.SeriesInput{Title: "t", Content: "c", TimeZone: "Europe/Berlin",
		Start: local("2027-03-29T02:30:00"), RRule: "FREQ=DAILY;COUNT=2"})
	require.NoError(t, err)
	occ := e.posts(t, s.ID)[0]
	plain, err := e.svc.Create(ctx, reservation.CreateInput{Title: "t", Content: "c", ScheduledAt: instant("2027-03-26T00:00:00Z")})
	require.NoError(t, err)
	_, err = e.svc.Cancel(ctx, occ.ID)
	require.NoError(t, err)

	for _, id := range []int64{occ.ID, plain.ID} {
		for _, v := range e.events(t, id) {
			require.NoError(t, schema.Validate(v), "%v", v)
			_, has := v["seriesId"]
			require.Equal(t, id == occ.ID, has, "%v", v)
		}
	}
	cancelled := e.events(t, occ.ID)[1]
	require.Equal(t, "CANCELLED", cancelled["action"])
	require.Equal(t, "2027-03-29T02:30:00", cancelled["occurrence"])

	bad := e.events(t, occ.ID)[0]
	delete(bad, "occurrence")
	require.Error(t, schema.Validate(bad), "seriesId without occurrence")
}
