package database

import (
	"strings"
	"unicode/utf8"
)

// maxErrorLen keeps last_error readable and within a TEXT column.
const maxErrorLen = 2000

// TruncateError makes s fit a last_error column: valid UTF-8 (MySQL in
// strict mode refuses a TEXT value with a broken character, and an error
// may quote a broker's or a webhook's answer), at most 2000 bytes, cut on a
// character boundary.
func TruncateError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxErrorLen {
		return s
	}
	cut := maxErrorLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
