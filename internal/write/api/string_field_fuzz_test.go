package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzStringFieldReadsWhatEncodingJSONReads: a string member of a body,
// as decodePost hands it over, reads to the text encoding/json reads from it,
// and is refused where encoding/json refuses it or the literal holds what
// is no text (invalid UTF-8, an unpaired surrogate escape).
func FuzzStringFieldReadsWhatEncodingJSONReads(f *testing.F) {
	for _, seed := range []string{`"a"`, `"caf\u00e9 \u2028"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00x"`, "\"\xff\"",
		`"<b> & \"q\" \\ \/ \t"`, `""`, `5`, `null`, `true`, `[]`, `{}`, ` "spaced" `} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, literal []byte) {
		req, err := decodePost([]byte(`{"title":` + string(literal) + `}`))
		if err != nil || req.Title == nil {
			return
		}
		got, err := stringField("title", req.Title)
		var want string
		wantErr := json.Unmarshal(req.Title, &want)
		if wantErr == nil && !validUnicode(req.Title) {
			wantErr = fieldError("title", "must be valid UTF-8 text (invalid bytes or an unpaired surrogate escape)")
		}
		if string(req.Title) == "null" {
			wantErr = fieldError("title", "must not be null")
		}
		if wantErr != nil {
			require.Error(t, err, "%q", req.Title)
			if re, ok := wantErr.(*requestError); ok {
				require.Equal(t, re.Error(), err.Error(), "%q", req.Title)
			} else {
				require.EqualError(t, err, fieldError("title", "must be a string").Error(), "%q", req.Title)
			}
			return
		}
		require.NoError(t, err, "%q", req.Title)
		require.Equal(t, want, *got, "%q", req.Title)
	})
}
