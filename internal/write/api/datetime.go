package api

import (
	"errors"
	"strings"
	"time"
)

// errLeapSecond is a date-time whose second is 60: valid RFC 3339 syntax,
// but no instant Go's time (nor the database) can hold.
var errLeapSecond = errors.New("leap seconds are not accepted")

// errDateTime is anything else that is not an RFC 3339 date-time.
var errDateTime = errors.New("not an RFC 3339 date-time")

// parseDateTime reads an RFC 3339 date-time (section 5.6) strictly, as
// time.Parse does not: the offset's hour is 00..23 and its minute 00..59,
// a fraction follows a '.'. 'T' and 'Z' may be lower case, as section 5.6's
// note allows (and JSON Schema validators of format date-time accept). A
// leap second (23:59:60Z) is errLeapSecond; any other refusal is errDateTime.
func parseDateTime(s string) (time.Time, error) {
	// YYYY-MM-DDTHH:MM:SS, then [.fraction], then Z or ±HH:MM.
	const base = len("2006-01-02T15:04:05")
	if len(s) < base+1 {
		return time.Time{}, errDateTime
	}
	for i := range base {
		c := s[i]
		switch i {
		case 4, 7:
			if c != '-' {
				return time.Time{}, errDateTime
			}
		case 10:
			if c != 'T' && c != 't' {
				return time.Time{}, errDateTime
			}
		case 13, 16:
			if c != ':' {
				return time.Time{}, errDateTime
			}
		default:
			if !isDigit(c) {
				return time.Time{}, errDateTime
			}
		}
	}
	rest := s[base:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && isDigit(rest[n]) {
			n++
		}
		if n == 1 {
			return time.Time{}, errDateTime // a '.' without digits
		}
		rest = rest[n:]
	}
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
		isDigit(rest[1]) && isDigit(rest[2]) && isDigit(rest[4]) && isDigit(rest[5]):
		if two(rest[1:3]) > 23 || two(rest[4:6]) > 59 {
			return time.Time{}, errDateTime
		}
	default:
		return time.Time{}, errDateTime
	}
	if s[17:19] == "60" {
		return time.Time{}, errLeapSecond
	}
	// The grammar holds; time.Parse checks the ranges of the fields (month
	// 1..12, the day in its month, hour 0..23, minute and second 0..59).
	// time.Parse wants them upper case.
	t, err := time.Parse(time.RFC3339Nano, s[:10]+"T"+strings.ToUpper(s[11:]))
	if err != nil {
		return time.Time{}, errDateTime
	}
	return t, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// two is the value of two ASCII digits.
func two(d string) int { return int(d[0]-'0')*10 + int(d[1]-'0') }
