package auth

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// maxNumericDate is the latest exp, nbf or iat accepted, 9999-12-31T23:59:59Z
// in seconds: beyond it a date is no real time (2^63-1 would overflow into
// the past and read as "expired"), and MySQL's DATETIME ends there too.
const maxNumericDate = 253402300799

// claimNames are the claims Verify reads.
var claimNames = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "scope"}

// claimError is a claims set refused before it is read; its text is the
// reason a client gets.
type claimError struct{ reason string }

func (e *claimError) Error() string { return e.reason }

func refuse(format string, args ...any) error {
	return &claimError{reason: fmt.Sprintf(format, args...)}
}

// checkClaims refuses a claims set that two readers could read two ways or
// that names no real time: a registered claim's name in another case, a sub that is not a string of valid UTF-8 (two
// byte strings would become one owner), exp, nbf or iat that is not a JSON
// number of seconds from 1970 to 9999, and a set that is not I-JSON (RFC
// 7493: invalid UTF-8 anywhere, or a claim named twice).
func checkClaims(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return refuse("the token's claims are not a JSON object")
	}
	for name := range members {
		for _, known := range claimNames {
			// The standard library matches names regardless of case:
			// "SUB" would be read as sub without the checks below.
			if name != known && strings.EqualFold(name, known) {
				return refuse("the token has a claim %q: claim names are case-sensitive, want %q", name, known)
			}
		}
	}
	if raw, ok := members["sub"]; ok {
		if len(raw) == 0 || raw[0] != '"' {
			return refuse("the token's sub is not a string")
		}
		if !jsontext.Value(raw).IsValid() {
			return refuse("the token's sub is not valid UTF-8")
		}
	}
	for _, name := range []string{"exp", "nbf", "iat"} {
		raw, ok := members[name]
		if !ok {
			continue
		}
		if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
			return refuse("the token's %s must be a JSON number (seconds since 1970), not %s", name, jsonKind(raw))
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		switch {
		case err != nil || f > maxNumericDate:
			return refuse("the token's %s is beyond any sane time (after 9999-12-31)", name)
		case f < 0:
			return refuse("the token's %s is before 1970", name)
		}
	}
	if !jsontext.Value(b).IsValid() {
		return refuse("the token's claims are not valid I-JSON (RFC 7493): invalid UTF-8, or a claim named twice")
	}
	return nil
}

// jsonKind names the kind of a JSON value by its first byte.
func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "that value"
}
