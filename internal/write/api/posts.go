package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// MaxBodyBytes is the largest request body the API reads; a larger one is
// answered 413.
const MaxBodyBytes = 1 << 20

// PostListJSON is a page of GET /api/v1/posts. NextCursor is always present:
// pass it as ?cursor= for the next page; it is "" on the last page.
type PostListJSON struct {
	Items      []PostJSON `json:"items"`
	NextCursor string     `json:"nextCursor"`
}

// postRequest is the body of create and patch. Raw fields let the handlers
// tell an absent field from null and name the field whose value is wrong.
type postRequest struct {
	Title       jsontext.Value `json:"title"`
	Content     jsontext.Value `json:"content"`
	ScheduledAt jsontext.Value `json:"scheduledAt"`
	PublishBy   jsontext.Value `json:"publishBy"`
}

// posts serves /api/v1/posts.
type posts struct {
	svc *reservation.Service
	log *slog.Logger
}

// IdempotencyKeyHeader is the request header that makes a create
// idempotent (the IETF httpapi draft); IdempotentReplayedHeader, "true",
// marks an answer given again for a key that had already created its post.
const (
	IdempotencyKeyHeader     = "Idempotency-Key"
	IdempotentReplayedHeader = "Idempotent-Replayed"
)

func (p *posts) create(w http.ResponseWriter, r *http.Request) {
	keys := r.Header.Values(IdempotencyKeyHeader)
	if len(keys) > 1 {
		writeError(w, r, p.log, fieldError(IdempotencyKeyHeader, "must be given at most once"))
		return
	}
	in, err := readInput(w, r, (*postRequest).createInput)
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	var res reservation.Created
	if len(keys) == 1 {
		res, err = p.svc.CreateOnce(r.Context(), keys[0], in)
	} else {
		res.Post, err = p.svc.Create(r.Context(), in)
	}
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	if res.Replayed {
		w.Header().Set(IdempotentReplayedHeader, "true")
	}
	w.Header().Set("Location", "/api/v1/posts/"+strconv.FormatInt(res.Post.ID, 10))
	writeJSON(w, r, p.log, http.StatusCreated, NewPostJSON(res.Post))
}

// byID is a request about the post of the path's id that takes no body
// (one sent anyway is ignored): GET reads the post, POST .../cancel cancels
// it. The answer is the post as action returns it.
func (p *posts) byID(action func(ctx context.Context, id int64) (*reservation.Post, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if batchOnlyPost(w, r) {
			return
		}
		id, err := pathID(r)
		if err != nil {
			writeError(w, r, p.log, err)
			return
		}
		post, err := action(r.Context(), id)
		if err != nil {
			writeError(w, r, p.log, err)
			return
		}
		writeJSON(w, r, p.log, http.StatusOK, NewPostJSON(post))
	}
}

// listParams are the query parameters of GET /api/v1/posts; any other is
// refused, so a misspelt filter is not silently read as "everything".
var listParams = []string{"status", "scheduledFrom", "scheduledTo", "order", "limit", "cursor", "ownerId", "seriesId"}

func (p *posts) list(w http.ResponseWriter, r *http.Request) {
	query, err := listQuery(r)
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	page, err := p.svc.List(r.Context(), query)
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	out := pageJSON{Items: make([]json.RawMessage, 0, len(page.Items)), NextCursor: page.NextCursor}
	size := 0
	for i := range page.Items {
		item, err := json.Marshal(NewPostJSON(&page.Items[i]))
		if err != nil {
			writeError(w, r, p.log, fmt.Errorf("encode response: %w", err))
			return
		}
		if i > 0 && size+len(item) > MaxPageBytes {
			// The page ends early; the next one starts after the last post
			// answered, so the client misses nothing.
			out.NextCursor = page.CursorAfter(i - 1)
			break
		}
		size += len(item) + 1
		out.Items = append(out.Items, item)
	}
	page = nil // the posts are encoded: let them go while a slow client reads
	writeJSON(w, r, p.log, http.StatusOK, out)
}

// MaxPageBytes bounds the posts of one list answer, encoded: a page ends
// before the post that would take it past this, with a nextCursor after the
// last post answered (a page has at least one post, of at most about 120 KB).
// So a client that asks for many large posts and reads slowly holds little
// of the server's memory.
const MaxPageBytes = 1 << 20

// pageJSON is PostListJSON with each post already encoded.
type pageJSON struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"nextCursor"`
}

// listQuery reads the query parameters of a list request. Each may appear
// once, and an empty value is the same as none; the service checks what it
// knows better (status, order, cursor, the range).
func listQuery(r *http.Request) (reservation.ListQuery, error) {
	var query reservation.ListQuery
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return query, &requestError{status: http.StatusBadRequest, detail: "malformed query string: " + err.Error()}
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names) // the same answer for the same request
	for _, name := range names {
		if !slices.Contains(listParams, name) {
			return query, fieldError(name, fmt.Sprintf("unknown query parameter; known: %s", strings.Join(listParams, ", ")))
		}
		if len(q[name]) > 1 {
			return query, fieldError(name, "must be given at most once")
		}
	}
	query.Status = reservation.Status(q.Get("status"))
	query.Order = reservation.ListOrder(q.Get("order"))
	query.Cursor = q.Get("cursor")
	if owner := q.Get("ownerId"); owner != "" {
		// Anyone may name themselves; naming another owner takes the admin
		// scope, so the filter never reads as a way into others' posts.
		if c, ok := auth.CallerFrom(r.Context()); ok && !c.Admin() && owner != c.Subject {
			return query, &requestError{status: http.StatusForbidden, field: "ownerId",
				detail: "ownerId: listing another owner's posts needs the " + auth.AdminScope + " scope"}
		}
		query.OwnerID = &owner
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"scheduledFrom", &query.ScheduledFrom}, {"scheduledTo", &query.ScheduledTo}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		hint := ""
		if strings.Contains(s, " ") {
			// A literal "+02:00" in a query string reads as " 02:00".
			hint = "; write + as %2B in a URL"
		}
		t, err := dateTimeValue(f.name, s, hint)
		if err != nil {
			return query, err
		}
		*f.dst = t
	}
	if s := q.Get("seriesId"); s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 1 || strings.TrimLeft(s, "0123456789") != "" {
			return query, fieldError("seriesId", fmt.Sprintf("must be a positive integer, got %q", s))
		}
		query.SeriesID = &id
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > reservation.MaxListLimit {
			return query, fieldError("limit", fmt.Sprintf("must be an integer from 1 to %d", reservation.MaxListLimit))
		}
		query.Limit = n
	}
	return query, nil
}

func (p *posts) update(w http.ResponseWriter, r *http.Request) {
	if batchOnlyPost(w, r) {
		return
	}
	id, err := pathID(r)
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	in, err := readInput(w, r, (*postRequest).updateInput)
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	post, err := p.svc.Update(r.Context(), id, in)
	if err != nil {
		writeError(w, r, p.log, err)
		return
	}
	writeJSON(w, r, p.log, http.StatusOK, NewPostJSON(post))
}

// readInput reads a post's JSON body and turns it into the service's
// input with convert (createInput or updateInput).
func readInput[T any](w http.ResponseWriter, r *http.Request, convert func(*postRequest) (T, error)) (T, error) {
	var req postRequest
	if err := readJSON(w, r, &req); err != nil {
		var zero T
		return zero, err
	}
	return convert(&req)
}

func (req *postRequest) createInput() (reservation.CreateInput, error) {
	var in reservation.CreateInput
	for _, f := range []struct {
		name string
		raw  jsontext.Value
	}{{"title", req.Title}, {"content", req.Content}, {"scheduledAt", req.ScheduledAt}} {
		if f.raw == nil {
			return in, fieldError(f.name, "is required")
		}
	}
	title, err := stringField("title", req.Title)
	if err != nil {
		return in, err
	}
	content, err := stringField("content", req.Content)
	if err != nil {
		return in, err
	}
	at, err := timeField("scheduledAt", req.ScheduledAt)
	if err != nil {
		return in, err
	}
	by, err := timeField("publishBy", req.PublishBy)
	if err != nil {
		return in, err
	}
	return reservation.CreateInput{Title: *title, Content: *content, ScheduledAt: *at, PublishBy: by}, nil
}

func (req *postRequest) updateInput() (reservation.UpdateInput, error) {
	var in reservation.UpdateInput
	var err error
	if in.Title, err = stringField("title", req.Title); err != nil {
		return in, err
	}
	if in.Content, err = stringField("content", req.Content); err != nil {
		return in, err
	}
	if in.ScheduledAt, err = timeField("scheduledAt", req.ScheduledAt); err != nil {
		return in, err
	}
	if in.PublishBy, err = timeField("publishBy", req.PublishBy); err != nil {
		return in, err
	}
	return in, nil
}

// stringField decodes a string field; nil when absent. null is refused: no
// field of a post can be unset.
func stringField(name string, raw jsontext.Value) (*string, error) {
	if raw == nil {
		return nil, nil
	}
	if string(raw) == "null" {
		return nil, fieldError(name, "must not be null")
	}
	if raw.Kind() != '"' {
		return nil, fieldError(name, "must be a string")
	}
	// Unquoting would turn invalid UTF-8 and lone surrogate escapes into
	// U+FFFD without a word; the raw literal still shows them.
	if !validUnicode(raw) {
		return nil, fieldError(name, "must be valid UTF-8 text (invalid bytes or an unpaired surrogate escape)")
	}
	unquoted, err := jsontext.AppendUnquote(nil, raw)
	if err != nil {
		return nil, fieldError(name, "must be a string")
	}
	s := string(unquoted)
	return &s, nil
}

// validUnicode reports whether a JSON string literal, as it appears in the
// body, holds only valid UTF-8 and no \u escape of an unpaired UTF-16
// surrogate (neither stands for a character).
func validUnicode(lit []byte) bool {
	if !utf8.Valid(lit) {
		return false
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		i++ // the escaped character; a backslash escape is two bytes
		if i >= len(lit) || lit[i] != 'u' {
			continue
		}
		r, ok := hex4(lit[i+1:])
		if !ok {
			return false // the decoder refuses this before; stay safe anyway
		}
		i += 4
		switch {
		case utf16.IsSurrogate(r) && r < 0xDC00:
			// A high surrogate must be followed by an escaped low one.
			if i+2 >= len(lit) || lit[i+1] != '\\' || lit[i+2] != 'u' {
				return false
			}
			lo, ok := hex4(lit[i+3:])
			if !ok || !utf16.IsSurrogate(lo) || lo < 0xDC00 {
				return false
			}
			i += 6
		case utf16.IsSurrogate(r):
			return false // a low surrogate without its high one
		}
	}
	return true
}

// hex4 reads the 4 hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(n), true
}

func timeField(name string, raw jsontext.Value) (*time.Time, error) {
	s, err := stringField(name, raw)
	if err != nil || s == nil {
		return nil, err
	}
	t, err := dateTimeValue(name, *s, "")
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// dateTimeValue reads s, the value of the field or parameter name, as a
// strict RFC 3339 date-time (parseDateTime); a refusal is a 400 naming it,
// its reason followed by hint when there is one.
func dateTimeValue(name, s, hint string) (time.Time, error) {
	t, err := parseDateTime(s)
	switch {
	case errors.Is(err, errLeapSecond):
		return t, fieldError(name, fmt.Sprintf("is a leap second; leap seconds are not accepted, got %q", s))
	case err != nil:
		return t, fieldError(name, fmt.Sprintf("must be an RFC 3339 date-time such as 2030-01-02T15:04:05Z, got %q%s", s, hint))
	}
	return t, nil
}

// pathID is the {id} of the path: a positive decimal integer.
func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	bad := fieldError("id", fmt.Sprintf("must be a positive integer, got %q", s))
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, bad
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, bad
	}
	return id, nil
}

// readJSON reads the request body, at most MaxBodyBytes of
// application/json, and decodes it into a post request.
func readJSON(w http.ResponseWriter, r *http.Request, dst *postRequest) error {
	body, err := readBody(w, r, MaxBodyBytes)
	if err != nil {
		return err
	}
	req, err := decodePost(body)
	if err != nil {
		return err
	}
	*dst = req
	return nil
}

// readBody reads the request body, at most limit bytes of
// application/json; the error is a requestError (415, 413, 408 or 400).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	mediaType, _, err := mime.ParseMediaType(ct)
	if err != nil || mediaType != "application/json" {
		return nil, &requestError{status: http.StatusUnsupportedMediaType,
			detail: fmt.Sprintf("Content-Type must be application/json, got %q", ct)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &requestError{status: http.StatusRequestEntityTooLarge,
				detail: fmt.Sprintf("request body is larger than %d bytes", limit)}
		}
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			// The server's read timeout cut a body still arriving.
			response.Refuse(w)
			return nil, &requestError{status: http.StatusRequestTimeout,
				detail: "the request body did not arrive within the server's read timeout"}
		}
		return nil, &requestError{status: http.StatusBadRequest, detail: "could not read the request body"}
	}
	return body, nil
}

// decodeOptions read a post request strictly: member names match the
// fields' exactly (case-sensitive), a name given twice is refused (RFC 7493:
// two parsers must never read one body two ways), and an unknown one too.
// Invalid UTF-8 passes here so that stringField can name the field it is in.
var decodeOptions = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(true),
)

// decodePost decodes a body holding one JSON object with only the fields of
// a post request; the error is a 400 that says what is wrong and, for one
// member, names it.
func decodePost(body []byte) (postRequest, error) {
	var req postRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return req, &requestError{status: http.StatusBadRequest, detail: "request body is empty; want a JSON object"}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), decodeOptions)
	// null would decode into the struct as nothing at all; anything but an
	// object is refused here (invalid JSON is left to the decoder's message).
	if k := dec.PeekKind(); k != '{' && k != 0 {
		return req, &requestError{status: http.StatusBadRequest, detail: "request body is not a JSON object"}
	}
	if err := jsonv2.UnmarshalDecode(dec, &req, decodeOptions); err != nil {
		return postRequest{}, jsonError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return postRequest{}, &requestError{status: http.StatusBadRequest, detail: "request body has data after the JSON object"}
	}
	return req, nil
}

// jsonError describes a decoding failure without Go type names.
func jsonError(err error) error {
	var syntax *jsontext.SyntacticError
	var semantic *jsonv2.SemanticError
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syntax):
		name, field := syntax.JSONPointer.LastToken(), topField(syntax.JSONPointer)
		if name == field {
			return &requestError{status: http.StatusBadRequest, field: field,
				detail: fmt.Sprintf("field %q appears more than once", name)}
		}
		// A name repeated inside a field's value: the field is what the
		// client can fix (its value must be a string anyway).
		return &requestError{status: http.StatusBadRequest, field: field,
			detail: fmt.Sprintf("field %q: name %q appears more than once in its value", field, name)}
	case errors.Is(err, jsonv2.ErrUnknownName) && errors.As(err, &semantic):
		name := semantic.JSONPointer.LastToken()
		return &requestError{status: http.StatusBadRequest, field: name, detail: fmt.Sprintf("unknown field %q", name)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &requestError{status: http.StatusBadRequest, detail: "malformed JSON: unexpected end of the body"}
	case errors.As(err, &syntax):
		return &requestError{status: http.StatusBadRequest,
			detail: fmt.Sprintf("malformed JSON at byte %d: %v", syntax.ByteOffset, syntax.Err)}
	case errors.As(err, &semantic) && semantic.JSONPointer == "":
		return &requestError{status: http.StatusBadRequest, detail: "request body must be a JSON object, got " + kindName(semantic.JSONKind)}
	case errors.As(err, &semantic):
		name := semantic.JSONPointer.LastToken()
		return fieldError(name, "must not be "+kindName(semantic.JSONKind))
	default:
		return &requestError{status: http.StatusBadRequest, detail: "malformed JSON request body"}
	}
}

// topField is the first token of p: the member of the request body that
// holds the place p points to.
func topField(p jsontext.Pointer) string {
	for tok := range p.Tokens() {
		return tok
	}
	return ""
}

// kindName names a JSON kind as a client writes it.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "another kind of value"
}

// writeJSON writes v with status; the body is marshalled first so a failure
// can still be answered with a 500.
func writeJSON(w http.ResponseWriter, r *http.Request, log *slog.Logger, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, r, log, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
