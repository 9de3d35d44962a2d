package event

import (
	"encoding/json"
	"testing"
	"time"
)

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
