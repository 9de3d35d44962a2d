package api

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"
)

// FuzzDecodePost: the post decoder either refuses a body with a 400, or
// accepts one JSON object (I-JSON apart from invalid UTF-8, which the
// fields' own check refuses later) whose members are exactly the known,
// each once, so any other strict parser reads it the same way.
func FuzzDecodePost(f *testing.F) {
	for _, seed := range []string{
		`{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`,
		`{"TITLE":"x","Content":"c","ScheduledAt":"2030-01-03T00:00:00Z"}`,
		`{"title":"a","Title":"b"}`,
		`{"title":"a","t\u0069tle":"b"}`,
		`{"title":null}`,
		`{"title":5} {}`,
		`[]`,
		`null`,
		` "x" `,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodePost(body)
		if err != nil {
			var re *requestError
			require.True(t, errors.As(err, &re), "%T %v", err, err)
			require.Equal(t, http.StatusBadRequest, re.status)
			return
		}
		v := jsontext.Value(strings.TrimSpace(string(body)))
		require.True(t, v.IsValid(jsontext.AllowInvalidUTF8(true)), "accepted %q", body)
		require.Equal(t, jsontext.Kind('{'), v.Kind())
		var members map[string]jsontext.Value
		require.NoError(t, jsonv2.Unmarshal(v, &members, jsontext.AllowInvalidUTF8(true)))
		for name, raw := range members {
			switch name {
			case "title":
				require.Equal(t, []byte(raw), []byte(req.Title))
			case "content":
				require.Equal(t, []byte(raw), []byte(req.Content))
			case "scheduledAt":
				require.Equal(t, []byte(raw), []byte(req.ScheduledAt))
			default:
				t.Fatalf("accepted unknown member %q in %q", name, body)
			}
		}
	})
}

// FuzzParseDateTime: what parseDateTime accepts is an RFC 3339 date-time
// that time.Parse reads as the same instant (once 't' and 'z' are upper
// case: RFC 3339 allows them lower case, time.Parse does not), with an offset within ±23:59,
// and it round-trips through its RFC 3339 form; a leap second is refused
// with its own error.
func FuzzParseDateTime(f *testing.F) {
	for _, seed := range []string{
		"2030-01-03T00:00:00Z", "2030-01-03T05:30:00.25+05:30", "2030-01-03T00:00:00+24:00",
		"2030-01-03T00:00:00+23:60", "2030-01-03T00:00:00,5Z", "2030-06-30T23:59:60Z", "2030-02-30T00:00:00Z",
		"0000-01-01t00:00:00Z", "2030-01-03t00:00:00.5z", "2030-01-03x00:00:00Z",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseDateTime(s)
		if err != nil {
			require.True(t, errors.Is(err, errDateTime) || errors.Is(err, errLeapSecond), "%v", err)
			return
		}
		std, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
		require.NoError(t, err, "accepted %q", s)
		require.True(t, got.Equal(std), "%q", s)
		_, offset := got.Zone()
		require.Less(t, offset, 24*3600, "%q", s)
		require.Greater(t, offset, -24*3600, "%q", s)
		require.NotContains(t, s, ",")
		back, err := parseDateTime(got.Format(time.RFC3339Nano))
		require.NoError(t, err, "%q formats as %q", s, got.Format(time.RFC3339Nano))
		require.True(t, back.Equal(got))
	})
}
