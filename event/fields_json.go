package event

import (
	"strconv"
	"time"
)

// contractValueJSON writes the value of an event whose fields are one of
// the contract's own (PostingEventFields, ReservationEventFields) straight
// into bytes, its keys in byte order: the same bytes valueJSON writes by
// marshalling both parts and merging them, at a fraction of the cost. ok is
// false for what it leaves to valueJSON: other fields, a Sequence, a
// string that encoding/json would escape, a time it would refuse.
func contractValueJSON(env Envelope, fields any) (value []byte, ok bool) {
	if env.Sequence != 0 || !plainJSON(env.EventID) || !plainJSON(string(env.EventType)) {
		return nil, false
	}
	b := make([]byte, 0, 320)
	switch f := fields.(type) {
	case PostingEventFields:
		if !plainJSON(string(f.Action)) || !plainJSON(f.Status) || !plainJSON(f.OwnerID) || !plainJSON(f.Occurrence) {
			return nil, false
		}
		b = appendString(append(b, `{"action":`...), string(f.Action))
		if b, ok = appendEnvelopeHead(append(b, ','), env); !ok {
			return nil, false
		}
		if f.Occurrence != "" {
			b = appendString(append(b, `,"occurrence":`...), f.Occurrence)
		}
		b = appendString(append(b, `,"ownerId":`...), f.OwnerID)
		b = strconv.AppendInt(append(b, `,"postId":`...), env.PostID, 10)
		if b, ok = appendTime(append(b, `,"scheduledAt":`...), f.ScheduledAt); !ok {
			return nil, false
		}
		if f.SeriesID != nil {
			b = strconv.AppendInt(append(b, `,"seriesId":`...), *f.SeriesID, 10)
		}
		b = appendString(append(b, `,"status":`...), f.Status)
		return append(b, '}'), true
	case ReservationEventFields:
		if !plainJSON(f.OwnerID) {
			return nil, false
		}
		if b, ok = appendEnvelopeHead(append(b, '{'), env); !ok {
			return nil, false
		}
		b = appendString(append(b, `,"ownerId":`...), f.OwnerID)
		b = strconv.AppendInt(append(b, `,"postId":`...), env.PostID, 10)
		if b, ok = appendTime(append(b, `,"scheduledAt":`...), f.ScheduledAt); !ok {
			return nil, false
		}
		return append(b, '}'), true
	}
	return nil, false
}

// appendEnvelopeHead appends the envelope's members that sort before
// "ownerId" (eventId, eventType, occurredAt).
func appendEnvelopeHead(b []byte, env Envelope) ([]byte, bool) {
	b = appendString(append(b, `"eventId":`...), env.EventID)
	b = appendString(append(b, `,"eventType":`...), string(env.EventType))
	return appendTime(append(b, `,"occurredAt":`...), env.OccurredAt)
}

// appendTime appends t as encoding/json writes a time.Time (its
// MarshalJSON), or is not ok where that fails (a year outside 0..9999).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	out, err := t.MarshalJSON()
	if err != nil {
		return b, false
	}
	return append(b, out...), true
}

// appendString appends s, which plainJSON accepted, as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSON reports whether encoding/json writes s between its quotes as
// it is: printable ASCII without the quote, the backslash, and the <, > and
// & it escapes for HTML.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
