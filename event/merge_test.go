package event

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestValueJSONWritesWhatTheMapsWrite: the fast merge writes the same bytes
// as the merge through maps, for the contract's fields and for fields that
// need escapes, nesting or the long way.
func TestValueJSONWritesWhatTheMapsWrite(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 123456000, time.UTC)
	env := Envelope{EventID: "01a23b76-e6d2-7d0e-b672-410624cc8684", EventType: PostingEvent, PostID: 7, OccurredAt: at}
	for name, fields := range map[string]any{
		"posting":     PostingEventFields{Action: ActionCreated, Status: "RESERVED", ScheduledAt: at},
		"reservation": ReservationEventFields{ScheduledAt: at},
		"nil":         nil,
		"null":        json.RawMessage(`null`),
		"empty":       struct{}{},
		"escapes": map[string]any{"title": `a "quoted" <b> & \ back, tab	` + "\u2028 é 😀",
			"nested": map[string]any{"x": []any{1, "}", "{", map[string]any{"y": ","}}}, "n": nil, "z": 1.5},
		"escaped key": map[string]any{"a<b": 1, "ownerId": "alice"},
		"ownerId": struct {
			OwnerID string `json:"ownerId"`
		}{"bob"},
		"raw spaced":   json.RawMessage(`{ "b" : 1 , "a" : [ 1, 2 ] }`),
		"raw repeated": json.RawMessage(`{"b":1,"b":2}`),
	} {
		want, wantErr := valueJSONMaps(env, fields)
		got, err := valueJSON(env, fields)
		require.Equal(t, wantErr, err, name)
		require.Equal(t, string(want), string(got), name)
	}
}

// TestValueJSONRefusesWhatTheMapsRefuse: fields that repeat an envelope key
// or are no object are refused either way.
func TestValueJSONRefusesWhatTheMapsRefuse(t *testing.T) {
	t.Parallel()
	env := Envelope{EventID: "id", EventType: PostingEvent, PostID: 7, OccurredAt: time.Unix(0, 0).UTC()}
	for name, fields := range map[string]any{
		"envelope key": map[string]any{"postId": 8},
		"array":        []int{1},
		"number":       5,
		"string":       "x",
	} {
		_, wantErr := valueJSONMaps(env, fields)
		require.ErrorIs(t, wantErr, ErrInvalid, name)
		_, err := valueJSON(env, fields)
		require.ErrorIs(t, err, ErrInvalid, name)
		require.Equal(t, wantErr.Error(), err.Error(), name)
	}
}

func BenchmarkNew(b *testing.B) {
	at := time.Now()
	fields := PostingEventFields{Action: ActionCreated, Status: "RESERVED", ScheduledAt: at}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(PostingEvent, 42, at, fields); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzValueJSONMatchesMaps: for any fields object, the fast member merge
// writes the same bytes (or the same error) as the merge through maps.
func FuzzValueJSONMatchesMaps(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"title":"x,}\"{"}`, `{"b":[1,{"c":"}"}],"a":null}`,
		`{"b":1,"b":2}`, `{"a\u003cb":1}`, `{"é":"😀"}`, `{"postId":1}`, `{ "z" : 1 }`} {
		f.Add(s)
	}
	env := Envelope{EventID: "id", EventType: PostingEvent, PostID: 7, OccurredAt: time.Unix(0, 0).UTC()}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		fields := json.RawMessage(s)
		want, wantErr := valueJSONMaps(env, fields)
		got, err := valueJSON(env, fields)
		if (wantErr == nil) != (err == nil) {
			t.Fatalf("fields %q: maps err %v, fast err %v", s, wantErr, err)
		}
		if string(want) != string(got) {
			t.Fatalf("fields %q:\nmaps %q\nfast %q", s, want, got)
		}
	})
}
