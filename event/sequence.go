package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The CloudEvents sequence extension (docs/messages.md, "Sequence and
// order"): every message carries a per-post sequence that increases with the
// outbox order of the post, so that any consumer can drop an event older
// than one it already applied, whatever the path to the broker did to the
// order (a send that timed out and landed after a later one of the same
// post, a broker that stalled). The sequence is the outbox row's id: the
// relay sends the events of a post in id order (the claim's head check), and
// a post's events are written after its row is updated, under its row lock,
// so a later event of a post always gets a larger id (on MySQL, PostgreSQL
// and SQLite alike).
const (
	// CloudEventsSequence is the attribute's name: the Kafka header
	// ce_sequence, the AMQP header cloudEvents_sequence.
	CloudEventsSequence = "sequence"
	// ValueSequence is the member of the JSON value holding the sequence as
	// a number.
	ValueSequence = "sequence"
	// SequenceDigits is the width of the sequence in a header: zero-padded
	// decimal, so that headers order as strings the way sequences order as
	// numbers.
	SequenceDigits = 20
)

// FormatSequence writes seq as a header value: SequenceDigits decimal
// digits, zero-padded.
func FormatSequence(seq int64) string { return fmt.Sprintf("%020d", seq) }

// ParseSequence reads a header value written by FormatSequence (any
// number of digits is accepted, leading zeros or not); it refuses anything
// that is not a positive decimal integer.
func ParseSequence(s string) (int64, error) {
	if s == "" || len(s) > SequenceDigits {
		return 0, fmt.Errorf("sequence %q: want 1 to %d decimal digits", s, SequenceDigits)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("sequence %q: want decimal digits only", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("sequence %q: want a positive 64-bit integer", s)
	}
	return n, nil
}

// WithSequence returns value, a JSON object, with the member "sequence": seq
// added before its first key that sorts after it (so a value in byte order,
// as New writes it, stays so). The outbox keeps values as New wrote them,
// and the sequence (the row's id) is known only once the row is written, so
// the senders add it here. A value that already has a sequence or is not an
// object, and a seq that is not positive (no sequence), leave value as it
// is.
func WithSequence(value []byte, seq int64) []byte {
	if seq <= 0 {
		return value // no sequence (a message not from an outbox row)
	}
	ms, ok := members(value, make([]member, 0, 16))
	if !ok {
		return withSequenceSorted(value, seq)
	}
	// Before the first key that sorts after it: the members keep their
	// order, and a value in byte order (as New writes it) stays so.
	at := len(ms)
	for i, m := range ms {
		if m.key == ValueSequence {
			return value
		}
		if at == len(ms) && m.key > ValueSequence {
			at = i
		}
	}
	return appendWithSequence(make([]byte, 0, len(value)+len(ValueSequence)+24), ms, at, seq)
}

// appendWithSequence writes the object of ms to out with the member
// "sequence": seq before ms[at] (after the last when at is len(ms)).
func appendWithSequence(out []byte, ms []member, at int, seq int64) []byte {
	num := strconv.AppendInt(nil, seq, 10)
	out = append(out, '{')
	for i, m := range ms {
		if i == at {
			out = appendMember(out, ValueSequence, num)
		}
		out = appendMember(out, m.key, m.value)
	}
	if at == len(ms) {
		out = appendMember(out, ValueSequence, num)
	}
	return append(out, '}')
}

// appendMember writes "key":value to out, after a comma unless it opens
// the object.
func appendMember(out []byte, key string, value []byte) []byte {
	if out[len(out)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, '"')
	out = append(out, key...)
	out = append(out, '"', ':')
	return append(out, value...)
}

// withSequenceSorted is WithSequence for a value that members does not take
// apart as it is, such as what PostgreSQL gives back of a jsonb column
// (`{"a": 1, "b": [1, 2]}`: a space after each colon and comma, keys
// ordered by length first). It writes the bytes withSequenceMaps writes
// (compact, keys in byte order, <, >, & and U+2028/U+2029 escaped as
// json.Marshal escapes them) without decoding the value into maps, which
// cost the relay a tenth of its process's CPU on PostgreSQL. A value it
// cannot take apart either (an escaped key, a key repeated) goes through
// the maps.
func withSequenceSorted(value []byte, seq int64) []byte {
	var compact bytes.Buffer
	compact.Grow(len(value))
	if json.Compact(&compact, value) != nil {
		return value // not JSON: the maps refuse it too
	}
	obj := compact.Bytes()
	// <, >, & and the first byte of U+2028/U+2029: only then a second pass.
	if bytes.ContainsAny(obj, "<>&") || bytes.IndexByte(obj, 0xE2) >= 0 {
		var escaped bytes.Buffer
		escaped.Grow(len(obj) + 16)
		json.HTMLEscape(&escaped, obj)
		obj = escaped.Bytes()
	}
	ms, ok := members(obj, make([]member, 0, 16))
	if !ok {
		return withSequenceMaps(value, seq)
	}
	slices.SortFunc(ms, func(x, y member) int { return strings.Compare(x.key, y.key) })
	at := len(ms)
	for i, m := range ms {
		if i > 0 && m.key == ms[i-1].key {
			return withSequenceMaps(value, seq) // the maps keep the last
		}
		if m.key == ValueSequence {
			return value
		}
		if at == len(ms) && m.key > ValueSequence {
			at = i
		}
	}
	return appendWithSequence(make([]byte, 0, len(obj)+len(ValueSequence)+24), ms, at, seq)
}

// withSequenceMaps is WithSequence through encoding/json, for a value that
// neither members nor withSequenceSorted takes apart.
func withSequenceMaps(value []byte, seq int64) []byte {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(value, &obj); err != nil || obj == nil {
		return value
	}
	if _, has := obj[ValueSequence]; has {
		return value
	}
	obj[ValueSequence] = json.RawMessage(strconv.FormatInt(seq, 10))
	out, err := json.Marshal(obj)
	if err != nil {
		return value
	}
	return out
}
