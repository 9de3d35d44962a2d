package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/httprate"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// MaxBatchPosts is the most posts one POST /api/v1/posts/batch creates.
const MaxBatchPosts = reservation.MaxBatchPosts

// MaxBatchBodyBytes is the largest body of POST /api/v1/posts/batch, 80 MiB:
// it holds MaxBatchPosts posts of the longest title (200 characters) and
// content (20,000 characters) in characters of up to 4 bytes of UTF-8, with
// both times and the JSON around them. Text written as \u escapes takes up
// to 6 bytes a character and may not fit; such a batch is answered 413 and
// must be split.
const MaxBatchBodyBytes = 80 << 20

// MaxBatchBytesReading bounds the declared bodies of the batch requests a
// handler reads and serves at once: two of the largest. Decoding a body
// holds about three times its size, so an unbounded number of 80 MiB
// uploads would hold gigabytes.
const MaxBatchBytesReading = 2 * MaxBatchBodyBytes

// BatchJSON is the answer of a batch create: the created posts in the
// order of the request.
type BatchJSON struct {
	Posts []PostJSON `json:"posts"`
}

// BatchPreviewJSON is the answer of a dry run: the posts the batch would
// create, in order, as drafts (no id or times of their own yet).
type BatchPreviewJSON struct {
	DryRun bool            `json:"dryRun"`
	Posts  []PostDraftJSON `json:"posts"`
}

// PostDraftJSON is a post a dry run would create: the fields a created post
// has before the database gives it an id and the commit its times.
type PostDraftJSON struct {
	Title       string             `json:"title"`
	Content     string             `json:"content"`
	Status      reservation.Status `json:"status"`
	ScheduledAt string             `json:"scheduledAt"`
	PublishBy   *string            `json:"publishBy"`
	OwnerID     string             `json:"ownerId"`
}

// batchRequest is the body of a batch create; the posts stay raw until the
// write limit has counted them.
type batchRequest struct {
	Posts  jsontext.Value `json:"posts"`
	DryRun jsontext.Value `json:"dryRun"`
}

// batchBody is a batch create's body read before the write limit: its
// posts, each still raw JSON, and whether it is a dry run.
type batchBody struct {
	items  []jsontext.Value
	dryRun bool
}

type batchKey struct{}

// batchFrom returns the body readBatch put into ctx.
func batchFrom(ctx context.Context) (*batchBody, bool) {
	b, ok := ctx.Value(batchKey{}).(*batchBody)
	return b, ok
}

// batchWrites is what a batch spends of the write limit: one write per
// post, and one for a dry run, which writes nothing whatever its size.
func (b *batchBody) batchWrites() int {
	if b.dryRun {
		return 1
	}
	return len(b.items)
}

// batchGuard is guard for the batch route, with the body read between
// authentication and the write limit: the limit counts the batch's posts,
// so it must know how many there are. A body refused as a whole (malformed,
// empty, too many posts) is answered there and spends nothing. Before the
// body is read, a caller without a write left is refused (refuseSpent),
// and the bodies read at once are bounded by MaxBatchBytesReading.
func batchGuard(cfg Config, h http.Handler, limit *writeLimiter, log *slog.Logger) http.Handler {
	h = limit.limit(scoped(h))
	h = readBatch(h, &bodyBudget{free: MaxBatchBytesReading}, log)
	h = limit.refuseSpent(h)
	if cfg.Auth != nil {
		h = auth.Middleware(cfg.Auth, h)
	}
	return h
}

// bodyBudget bounds the bytes of the batch bodies being read and served
// at once.
type bodyBudget struct {
	mu   sync.Mutex
	free int64
}

// take reserves n bytes, or reports false when fewer are free.
func (b *bodyBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.free {
		return false
	}
	b.free -= n
	return true
}

func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
}

// readBatch reads and decodes the batch's envelope, puts it into the
// request's context, and sets the write limit's increment to its writes.
// The body's declared length (the largest body when it has none) is held
// of budget until the request is served: one that does not fit is refused
// with 503 before its body is read.
func readBatch(next http.Handler, budget *bodyBudget, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size := r.ContentLength
		if size < 0 || size > MaxBatchBodyBytes {
			size = MaxBatchBodyBytes // unknown, or refused as 413 once that much is read
		}
		if !budget.take(size) {
			response.Refuse(w)
			w.Header().Set("Retry-After", "1")
			response.WriteProblem(w, http.StatusServiceUnavailable,
				"the server is reading as many batch bodies as it holds at once; nothing was written; retry after the time in Retry-After", "")
			return
		}
		defer budget.give(size)
		body, err := readBody(w, r, MaxBatchBodyBytes)
		if err != nil {
			writeBatchError(w, r, log, err)
			return
		}
		b, err := decodeBatch(body)
		body = nil // the posts hold what they need of it
		if err != nil {
			writeBatchError(w, r, log, err)
			return
		}
		ctx := context.WithValue(r.Context(), batchKey{}, b)
		ctx = httprate.WithIncrement(ctx, b.batchWrites())
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// decodeBatch decodes a body holding {"posts":[...],"dryRun"?}, strictly
// as decodePost reads a post, with each post left raw.
func decodeBatch(body []byte) (*batchBody, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, &requestError{status: http.StatusBadRequest, detail: `request body is empty; want a JSON object such as {"posts":[...]}`}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), decodeOptions)
	if k := dec.PeekKind(); k != '{' && k != 0 {
		return nil, &requestError{status: http.StatusBadRequest, detail: `request body is not a JSON object; want {"posts":[...]}`}
	}
	var req batchRequest
	if err := jsonv2.UnmarshalDecode(dec, &req, decodeOptions); err != nil {
		var syntax *jsontext.SyntacticError
		if errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syntax) {
			// Inside a post too: the pointer says exactly where.
			ptr := string(syntax.JSONPointer)
			return nil, placesError(fmt.Sprintf("%s: name %q appears more than once", ptr, syntax.JSONPointer.LastToken()), topField(syntax.JSONPointer),
				response.FieldError{Pointer: ptr, Detail: fmt.Sprintf("name %q appears more than once", syntax.JSONPointer.LastToken())})
		}
		return nil, jsonError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, &requestError{status: http.StatusBadRequest, detail: "request body has data after the JSON object"}
	}
	b := &batchBody{}
	switch {
	case req.Posts == nil:
		return nil, fieldError(reservation.BatchField, "is required: an array of 1 to "+strconv.Itoa(MaxBatchPosts)+" posts")
	case req.Posts.Kind() != '[':
		return nil, fieldError(reservation.BatchField, "must be an array of posts, not "+kindName(req.Posts.Kind()))
	}
	// Counted first, each item skipped: decoding millions of tiny items
	// ([0,0,...]) one by one would take gigabytes before the size check.
	n, err := countItems(req.Posts)
	if err != nil {
		return nil, jsonError(err)
	}
	if err := reservation.CheckBatchSize(n); err != nil {
		return nil, err
	}
	b.items = make([]jsontext.Value, 0, n)
	if err := jsonv2.Unmarshal(req.Posts, &b.items, decodeOptions); err != nil {
		return nil, jsonError(err)
	}
	switch string(req.DryRun) {
	case "", "false":
	case "true":
		b.dryRun = true
	default:
		return nil, fieldError("dryRun", "must be true or false, not "+kindName(req.DryRun.Kind()))
	}
	return b, nil
}

// countItems counts the values of arr, a JSON array, without decoding them.
func countItems(arr jsontext.Value) (int, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(arr), decodeOptions)
	if _, err := dec.ReadToken(); err != nil {
		return 0, err
	}
	n := 0
	for dec.PeekKind() != ']' {
		if err := dec.SkipValue(); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// createBatch serves POST /api/v1/posts/batch, after readBatch and the
// write limit.
func (p *posts) createBatch(w http.ResponseWriter, r *http.Request) {
	b, ok := batchFrom(r.Context())
	if !ok {
		writeError(w, r, p.log, errors.New("batch create without its body"))
		return
	}
	keys := r.Header.Values(IdempotencyKeyHeader)
	if len(keys) > 1 {
		writeError(w, r, p.log, fieldError(IdempotencyKeyHeader, "must be given at most once"))
		return
	}
	key := ""
	if len(keys) == 1 {
		key = keys[0]
		if err := reservation.ValidateIdempotencyKey(key); err != nil {
			writeError(w, r, p.log, err)
			return
		}
	}
	ins, places, unread := batchInputs(b.items)
	if len(places) > 0 {
		// The rules' verdicts on the fields that did decode, so that one
		// answer names every fault.
		var be *reservation.BatchError
		if errors.As(p.svc.ValidateBatch(ins), &be) {
			places = mergePlaces(places, be.Items, unread)
		}
		writeBatchError(w, r, p.log, placesError("", reservation.BatchField, places...))
		return
	}
	if b.dryRun {
		// A dry run neither reads nor records the Idempotency-Key.
		drafts, err := p.svc.PreviewBatch(r.Context(), ins)
		if err != nil {
			writeBatchError(w, r, p.log, err)
			return
		}
		out := BatchPreviewJSON{DryRun: true, Posts: make([]PostDraftJSON, len(drafts))}
		for i, d := range drafts {
			j := NewPostJSON(d)
			out.Posts[i] = PostDraftJSON{Title: j.Title, Content: j.Content, Status: j.Status,
				ScheduledAt: j.ScheduledAt, PublishBy: j.PublishBy, OwnerID: j.OwnerID}
		}
		writeJSON(w, r, p.log, http.StatusOK, out)
		return
	}
	res, err := p.svc.CreateBatch(r.Context(), key, ins)
	if err != nil {
		writeBatchError(w, r, p.log, err)
		return
	}
	out := BatchJSON{Posts: make([]PostJSON, len(res.Posts))}
	for i, post := range res.Posts {
		out.Posts[i] = NewPostJSON(post)
	}
	if res.Replayed {
		w.Header().Set(IdempotentReplayedHeader, "true")
	}
	writeJSON(w, r, p.log, http.StatusCreated, out)
}

// batchInputs turns each raw post into the service's input, and lists every
// field that cannot be read (not a string, not a date-time, missing) as a
// place of the body. A post that is not an object, or has an unknown field,
// is one place; its input is left empty.
func batchInputs(items []jsontext.Value) (ins []reservation.CreateInput, places []response.FieldError, unread []bool) {
	ins = make([]reservation.CreateInput, len(items))
	unread = make([]bool, len(items))
	for i, raw := range items {
		at := "/" + reservation.BatchField + "/" + strconv.Itoa(i)
		if k := raw.Kind(); k != '{' {
			places = append(places, response.FieldError{Pointer: at, Detail: "must be a JSON object, not " + kindName(k)})
			unread[i] = true
			continue
		}
		req, err := decodePost(raw)
		if err != nil {
			var re *requestError
			if errors.As(err, &re) && re.field != "" {
				places = append(places, response.FieldError{Pointer: at + "/" + escapePointer(re.field), Detail: re.detail})
			} else {
				places = append(places, response.FieldError{Pointer: at, Detail: err.Error()})
			}
			unread[i] = true
			continue
		}
		in, errs := req.batchInput()
		ins[i] = in
		for _, re := range errs {
			places = append(places, response.FieldError{Pointer: at + "/" + re.field, Detail: strings.TrimPrefix(re.detail, re.field+": ")})
		}
	}
	return ins, places, unread
}

// batchInput is createInput that reads every field and returns the errors
// of all that cannot be read; each of them is left zero in the input.
func (req *postRequest) batchInput() (reservation.CreateInput, []*requestError) {
	var in reservation.CreateInput
	var errs []*requestError
	fail := func(err error) {
		var re *requestError
		if errors.As(err, &re) {
			errs = append(errs, re)
		}
	}
	for _, f := range []struct {
		name string
		raw  jsontext.Value
		dst  *string
	}{{"title", req.Title, &in.Title}, {"content", req.Content, &in.Content}} {
		switch s, err := stringField(f.name, f.raw); {
		case err != nil:
			fail(err)
		case s == nil:
			fail(fieldError(f.name, "is required"))
		default:
			*f.dst = *s
		}
	}
	switch at, err := timeField("scheduledAt", req.ScheduledAt); {
	case err != nil:
		fail(err)
	case at == nil:
		fail(fieldError("scheduledAt", "is required"))
	default:
		in.ScheduledAt = *at
	}
	by, err := timeField("publishBy", req.PublishBy)
	fail(err)
	in.PublishBy = by
	return in, errs
}

// mergePlaces adds to places, the fields that could not be read, the rules'
// verdicts on the others, in the order of the posts, then of the fields.
// A post that could not be read as a whole (unread), or a field already
// named, gets no verdict: its input is empty, not the client's.
func mergePlaces(places []response.FieldError, items []reservation.ItemError, unread []bool) []response.FieldError {
	named := make(map[string]bool, len(places))
	for _, pl := range places {
		named[pl.Pointer] = true
	}
	for _, it := range items {
		ptr := "/" + reservation.BatchField + "/" + strconv.Itoa(it.Index) + "/" + it.Field
		if unread[it.Index] || named[ptr] {
			continue
		}
		places = append(places, response.FieldError{Pointer: ptr, Detail: it.Reason})
	}
	slices.SortStableFunc(places, func(a, b response.FieldError) int {
		return comparePointers(a.Pointer, b.Pointer)
	})
	return places
}

// comparePointers orders /posts/N/... pointers by N, then by the field's
// place in a post (title, content, scheduledAt, publishBy, other).
func comparePointers(a, b string) int {
	ia, fa := splitPointer(a)
	ib, fb := splitPointer(b)
	if ia != ib {
		return ia - ib
	}
	return fieldRank(fa) - fieldRank(fb)
}

func splitPointer(p string) (int, string) {
	rest := strings.TrimPrefix(p, "/"+reservation.BatchField+"/")
	num, field, _ := strings.Cut(rest, "/")
	n, _ := strconv.Atoi(num)
	return n, field
}

func fieldRank(f string) int {
	if i := slices.Index([]string{"", "title", "content", "scheduledAt", "publishBy"}, f); i >= 0 {
		return i
	}
	return 5
}

// escapePointer escapes a member name as a JSON Pointer token (RFC 6901).
func escapePointer(name string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

// batchProblem is a 400 that names places of the body: detail (built from
// them when empty), field, and the places as the problem's errors list.
type batchProblem struct {
	detail, field string
	places        []response.FieldError
}

func (e *batchProblem) Error() string { return e.detail }

// placesError is a batchProblem of places; an empty detail says how many
// there are and which is first.
func placesError(detail, field string, places ...response.FieldError) *batchProblem {
	if detail == "" {
		detail = fmt.Sprintf("%d fields of the batch are invalid (listed in errors); nothing was written; the first: %s: %s",
			len(places), places[0].Pointer, places[0].Detail)
		if len(places) == 1 {
			detail = fmt.Sprintf("%s: %s; nothing was written", places[0].Pointer, places[0].Detail)
		}
	}
	return &batchProblem{detail: detail, field: field, places: places}
}

// writeBatchError answers err as writeError does, and every 400 that names
// a place of the body with the problem's errors list: each invalid post
// field of the batch, or the member of the body at fault.
func writeBatchError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var bp *batchProblem
	var be *reservation.BatchError
	var ve *reservation.ValidationError
	var re *requestError
	switch {
	case errors.As(err, &bp):
	case errors.As(err, &be):
		places := make([]response.FieldError, len(be.Items))
		for i, it := range be.Items {
			places[i] = response.FieldError{Pointer: "/" + reservation.BatchField + "/" + strconv.Itoa(it.Index) + "/" + it.Field, Detail: it.Reason}
		}
		bp = placesError("", reservation.BatchField, places...)
	case errors.As(err, &ve) && ve.Field != reservation.IdempotencyKeyField:
		bp = placesError(ve.Field+": "+ve.Reason, ve.Field, response.FieldError{Pointer: "/" + escapePointer(ve.Field), Detail: ve.Reason})
	case errors.As(err, &re) && re.status == http.StatusBadRequest && re.field != "" && re.field != IdempotencyKeyHeader:
		bp = placesError(re.detail, re.field,
			response.FieldError{Pointer: "/" + escapePointer(re.field), Detail: strings.TrimPrefix(re.detail, re.field+": ")})
	default:
		writeError(w, r, log, err)
		return
	}
	response.WriteProblemErrors(w, http.StatusBadRequest, bp.detail, bp.field, bp.places)
}

// batchLimitDetail is the 429's detail for a batch, which spends one write
// per post: how many it needs and how many are left, or that it can never
// pass; other requests get detail.
func batchLimitDetail(w http.ResponseWriter, r *http.Request, l WriteLimit, detail string) string {
	b, ok := batchFrom(r.Context())
	if !ok {
		return detail
	}
	n := b.batchWrites()
	if n > l.Requests {
		return fmt.Sprintf("too many writes: a batch spends one write per post, and this one's %d posts are more than the %d writes per %s each caller may make; split it",
			n, l.Requests, l.Window)
	}
	return fmt.Sprintf("too many writes: a batch spends one write per post, and this one's %d posts are more than the %s writes left of at most %d per %s for this caller; nothing was written; retry after the time in Retry-After, or send fewer posts",
		n, w.Header().Get("X-RateLimit-Remaining"), l.Requests, l.Window)
}

// batchOnlyPost answers 405 with Allow: POST to a request for
// /api/v1/posts/batch that the mux gave to a route of /api/v1/posts/{id}
// (GET, HEAD, PATCH), as the OpenAPI document says of the path, instead of
// a 400 for the id "batch". It reports whether it answered.
func batchOnlyPost(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("id") != "batch" {
		return false
	}
	w.Header().Set("Allow", http.MethodPost)
	response.WriteProblem(w, http.StatusMethodNotAllowed,
		fmt.Sprintf("method %s is not allowed on %s; allowed: POST", r.Method, r.URL.Path), "")
	return true
}
