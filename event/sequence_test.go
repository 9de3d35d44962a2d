package event

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// jsonbValues are values as PostgreSQL gives back a jsonb column: a space
// after each colon and comma, keys ordered by length first.
var jsonbValues = []string{
	`{"postId": 7, "status": "WORKING", "eventId": "01a23b76-e6d2-7d0e-b672-410624cc8684", "eventType": "POSTING_EVENT"}`,
	`{"a<b": "<&>", "nested": {"a": 1, "z": [1, 2, {"y": "a, b"}]}, "postId": 7, "eventId": "x"}`,
	`{"t": "line\u2028sep é 😀", "z": null, "ownerId": "alice"}`,
	`{"zz": 1, "sequence": 3}`,
	`{}`,
	`{"b": 1, "b": 2}`,
	`{"a\u003cb": 1, "c": 2}`,
	`[1, 2]`,
	`null`,
	`{"a": 1`,
}

// TestWithSequenceOfJSONBTextWritesWhatTheMapsWrite: a value as PostgreSQL's
// jsonb gives it back gets the sequence in the same bytes as through maps:
// compact, keys in byte order, HTML characters escaped.
func TestWithSequenceOfJSONBTextWritesWhatTheMapsWrite(t *testing.T) {
	t.Parallel()
	for _, v := range jsonbValues {
		got := WithSequence([]byte(v), 42)
		require.Equal(t, string(withSequenceMaps([]byte(v), 42)), string(got), v)
	}
	got := WithSequence([]byte(jsonbValues[0]), 42)
	require.Equal(t,
		`{"eventId":"01a23b76-e6d2-7d0e-b672-410624cc8684","eventType":"POSTING_EVENT","postId":7,"sequence":42,"status":"WORKING"}`,
		string(got))
}

// FuzzWithSequenceMatchesMaps: for any value that members does not take
// apart as it is, WithSequence writes what the maps write.
func FuzzWithSequenceMatchesMaps(f *testing.F) {
	for _, v := range jsonbValues {
		f.Add(v, int64(42))
	}
	f.Fuzz(func(t *testing.T, v string, seq int64) {
		if seq <= 0 {
			return
		}
		if _, ok := members([]byte(v), nil); ok {
			return // kept in its own order, as New wrote it
		}
		want := withSequenceMaps([]byte(v), seq)
		got := WithSequence([]byte(v), seq)
		if string(want) != string(got) {
			t.Fatalf("value %q:\nmaps %q\ngot  %q", v, want, got)
		}
		if json.Valid([]byte(v)) != json.Valid(got) {
			t.Fatalf("value %q gave %q", v, got)
		}
	})
}

func BenchmarkWithSequenceOfJSONBText(b *testing.B) {
	v := []byte(jsonbValues[0])
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			withSequenceSorted(v, 42)
		}
	})
	b.Run("maps", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			withSequenceMaps(v, 42)
		}
	})
}
