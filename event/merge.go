package event

import (
	"bytes"
	"slices"
	"strings"
)

// member is one member of a JSON object: its key as written between the
// quotes, and its raw value.
type member struct {
	key   string
	value []byte
}

// members splits obj, a JSON object as json.Marshal writes it (compact), into
// its members. It reports false for anything it does not take apart with
// certainty (whitespace, a key with an escape, malformed input), and the
// caller then goes the long way through encoding/json.
func members(obj []byte, into []member) ([]member, bool) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return into, false
	}
	i := 1
	if obj[i] == '}' {
		return into, i == len(obj)-1
	}
	for {
		// The key: a string without escapes.
		if obj[i] != '"' {
			return into, false
		}
		end := bytes.IndexByte(obj[i+1:], '"')
		if end < 0 {
			return into, false
		}
		key := obj[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return into, false
		}
		i += end + 2
		if i >= len(obj) || obj[i] != ':' {
			return into, false
		}
		i++
		// The value: up to the comma or brace that closes it at depth 0.
		start, depth, inString := i, 0, false
		for ; i < len(obj); i++ {
			c := obj[i]
			if inString {
				switch c {
				case '\\':
					i++
				case '"':
					inString = false
				}
				continue
			}
			switch c {
			case '"':
				inString = true
				continue
			case '{', '[':
				depth++
				continue
			case '}', ']':
				if depth > 0 {
					depth--
					continue
				}
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
			break // a ',' or the closing '}' at depth 0
		}
		if i >= len(obj) || i == start {
			return into, false
		}
		into = append(into, member{key: string(key), value: obj[start:i]})
		if obj[i] == '}' {
			return into, i == len(obj)-1
		}
		i++ // the comma
	}
}

// mergeSorted writes the members of a and b as one object with its keys in
// byte order, as json.Marshal writes a map[string]json.RawMessage of the
// same members. dup is a key found in both (nothing is written then); ok is
// false when a or b is not one members splits, or repeats a key of its own.
func mergeSorted(a, b []byte) (merged []byte, dup string, ok bool) {
	all, ok := members(a, make([]member, 0, 16))
	if !ok {
		return nil, "", false
	}
	na := len(all)
	if all, ok = members(b, all); !ok {
		return nil, "", false
	}
	for _, m := range all[na:] {
		for _, n := range all[:na] {
			if m.key == n.key {
				return nil, m.key, true
			}
		}
	}
	slices.SortFunc(all, func(x, y member) int { return strings.Compare(x.key, y.key) })
	size := 2
	for i, m := range all {
		if i > 0 && m.key == all[i-1].key {
			return nil, "", false // a key repeated within one object
		}
		size += len(m.key) + len(m.value) + 4
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	for i, m := range all {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, m.key...)
		out = append(out, '"', ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), "", true
}
