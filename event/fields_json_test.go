package event

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The contract's own fields are written straight, and the bytes are those
// of the merge through maps: for a post of its own and an occurrence, and
// for a reservation.
func TestContractFieldsAreWrittenAsTheMapsWriteThem(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 123456000, time.UTC)
	env := Envelope{EventID: "01a23b76-e6d2-7d0e-b672-410624cc8684", EventType: PostingEvent, PostID: 7, OccurredAt: at}
	series := int64(12)
	for name, fields := range map[string]any{
		"own post":    PostingEventFields{Action: ActionCreated, Status: "RESERVED", ScheduledAt: at.Add(time.Hour), OwnerID: "alice"},
		"occurrence":  PostingEventFields{Action: ActionUpdated, Status: "WORKING", ScheduledAt: at, SeriesID: &series, Occurrence: "2026-03-29T02:30:00"},
		"reservation": ReservationEventFields{ScheduledAt: at.In(time.FixedZone("x", 3600)), OwnerID: ""},
	} {
		want, err := valueJSONMaps(env, fields)
		require.NoError(t, err, name)
		got, ok := contractValueJSON(env, fields)
		require.True(t, ok, "%s: not written straight", name)
		require.Equal(t, string(want), string(got), name)
	}
}

// FuzzContractFieldsMatchMaps: whatever the contract's fields and the
// envelope hold (times in any zone, of any year, with a monotonic reading or
// not), New's value is the bytes (or the error) of the merge through maps.
func FuzzContractFieldsMatchMaps(f *testing.F) {
	f.Add("CREATED", "RESERVED", "", "", int64(0), false, int64(1796583462), int64(123456789), int32(0), false, false, "01a23b76-e6d2-7d0e-b672-410624cc8684", "POSTING_EVENT", int64(7), int64(0))
	f.Add("UPDATED", "WORKING", "bob<&>", "2026-03-29T02:30:00", int64(5), true, int64(-1), int64(0), int32(-34200), true, false, "id", "POSTING_EVENT", int64(1), int64(0))
	f.Add("", "é\u2028\"\\", "a\x00b", "\xff", int64(-3), true, int64(253402300800), int64(0), int32(3601), false, true, "x", "POSTING_RESERVATION_EVENT", int64(-2), int64(4))
	f.Add("CANCELLED", "CANCELLED", "carol", "", int64(1), false, int64(-62135596801), int64(999999999), int32(86400), true, true, "", "a\x7fb", int64(0), int64(-1))
	f.Fuzz(func(t *testing.T, action, status, owner, occurrence string, seriesID int64, inSeries bool, sec, nsec int64, zone int32, monotonic, reservation bool, eventID, eventType string, postID, sequence int64) {
		at := time.Unix(sec, nsec).In(time.FixedZone("", int(zone)))
		if monotonic {
			now := time.Now()
			at = now.Add(at.Sub(now))
		}
		env := Envelope{EventID: eventID, EventType: Type(eventType), PostID: postID, OccurredAt: at.Add(-time.Minute), Sequence: sequence}
		var fields any = PostingEventFields{Action: Action(action), Status: status, ScheduledAt: at, OwnerID: owner, Occurrence: occurrence}
		if inSeries {
			p := fields.(PostingEventFields)
			p.SeriesID = &seriesID
			fields = p
		}
		if reservation {
			fields = ReservationEventFields{ScheduledAt: at, OwnerID: owner}
		}
		want, wantErr := valueJSONMaps(env, fields)
		got, err := valueJSON(env, fields)
		if (wantErr == nil) != (err == nil) {
			t.Fatalf("maps err %v, valueJSON err %v", wantErr, err)
		}
		if string(want) != string(got) {
			t.Fatalf("\nmaps      %q\nvalueJSON %q", want, got)
		}
	})
}
