package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// SeriesListJSON is a page of GET /api/v1/series; NextCursor is "" on the
// last page.
type SeriesListJSON struct {
	Items      []SeriesJSON `json:"items"`
	NextCursor string       `json:"nextCursor"`
}

// seriesRequest is the body of a series create or patch; raw fields tell
// an absent field from null.
type seriesRequest struct {
	Title         jsontext.Value `json:"title"`
	Content       jsontext.Value `json:"content"`
	TimeZone      jsontext.Value `json:"timeZone"`
	Start         jsontext.Value `json:"start"`
	RRule         jsontext.Value `json:"rrule"`
	PublishWithin jsontext.Value `json:"publishWithin"`
}

// series serves /api/v1/series.
type series struct {
	svc *reservation.Service
	log *slog.Logger
}

// routes are the series' routes: reads, writes of one write, and the
// create and edit, which spend one write per occurrence within the
// horizon (costly).
func (s *series) routes(read, write, costly func(http.HandlerFunc) http.Handler) map[string]http.Handler {
	return map[string]http.Handler{
		"POST /api/v1/series":             costly(s.create),
		"GET /api/v1/series":              read(s.list),
		"GET /api/v1/series/{id}":         read(s.byID(s.svc.GetSeries)),
		"PATCH /api/v1/series/{id}":       costly(s.update),
		"POST /api/v1/series/{id}/cancel": write(s.byID(s.svc.CancelSeries)),
	}
}

func (s *series) create(w http.ResponseWriter, r *http.Request) {
	var req seriesRequest
	if err := readObject(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	in, err := req.createInput()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.svc.CreateSeries(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/series/"+strconv.FormatInt(v.ID, 10))
	writeJSON(w, r, s.log, http.StatusCreated, NewSeriesJSON(v))
}

func (s *series) update(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req seriesRequest
	if err := readObject(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	in, err := req.updateInput()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.svc.UpdateSeries(r.Context(), id, in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, r, s.log, http.StatusOK, NewSeriesJSON(v))
}

// byID is a bodiless request about the series of the path's id.
func (s *series) byID(action func(ctx context.Context, id int64) (*reservation.SeriesView, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := pathID(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v, err := action(r.Context(), id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, r, s.log, http.StatusOK, NewSeriesJSON(v))
	}
}

// seriesListParams are the query parameters of GET /api/v1/series.
var seriesListParams = []string{"status", "limit", "cursor", "ownerId"}

func (s *series) list(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, &requestError{status: http.StatusBadRequest, detail: "malformed query string: " + err.Error()})
		return
	}
	var query reservation.SeriesListQuery
	for name, vs := range q {
		if !slices.Contains(seriesListParams, name) {
			s.fail(w, r, fieldError(name, "unknown query parameter; known: "+strings.Join(seriesListParams, ", ")))
			return
		}
		if len(vs) > 1 {
			s.fail(w, r, fieldError(name, "must be given at most once"))
			return
		}
	}
	query.Status = reservation.SeriesStatus(q.Get("status"))
	query.Cursor = q.Get("cursor")
	if owner := q.Get("ownerId"); owner != "" {
		if c, ok := auth.CallerFrom(r.Context()); ok && !c.Admin() && owner != c.Subject {
			s.fail(w, r, &requestError{status: http.StatusForbidden, field: "ownerId",
				detail: "ownerId: listing another owner's series needs the " + auth.AdminScope + " scope"})
			return
		}
		query.OwnerID = &owner
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > reservation.MaxListLimit {
			s.fail(w, r, fieldError("limit", fmt.Sprintf("must be an integer from 1 to %d", reservation.MaxListLimit)))
			return
		}
		query.Limit = n
	}
	page, err := s.svc.ListSeries(r.Context(), query)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := SeriesListJSON{Items: make([]SeriesJSON, 0, len(page.Items)), NextCursor: page.NextCursor}
	for i := range page.Items {
		out.Items = append(out.Items, NewSeriesJSON(&page.Items[i]))
	}
	writeJSON(w, r, s.log, http.StatusOK, out)
}

// fail answers err: the series' own not-found and conflicts, else as
// writeError does.
func (s *series) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, reservation.ErrSeriesNotFound):
		response.WriteProblem(w, http.StatusNotFound, "no series has id "+r.PathValue("id"), "")
	case errors.Is(err, reservation.ErrConflict):
		response.WriteProblem(w, http.StatusConflict, "the series was changed by another request meanwhile; read it again and retry", "")
	default:
		writeError(w, r, s.log, err)
	}
}

func (req *seriesRequest) createInput() (reservation.SeriesInput, error) {
	var in reservation.SeriesInput
	for _, f := range []struct {
		name string
		raw  jsontext.Value
	}{{"title", req.Title}, {"content", req.Content}, {"timeZone", req.TimeZone}, {"start", req.Start}, {"rrule", req.RRule}} {
		if f.raw == nil {
			return in, fieldError(f.name, "is required")
		}
	}
	up, err := req.updateInput()
	if err != nil {
		return in, err
	}
	if up.ClearPublishWithin {
		up.PublishWithin = nil
	}
	return reservation.SeriesInput{Title: *up.Title, Content: *up.Content, TimeZone: *up.TimeZone, Start: *up.Start,
		RRule: *up.RRule, PublishWithin: up.PublishWithin}, nil
}

func (req *seriesRequest) updateInput() (reservation.SeriesUpdate, error) {
	var in reservation.SeriesUpdate
	var err error
	for _, f := range []struct {
		name string
		raw  jsontext.Value
		dst  **string
	}{{"title", req.Title, &in.Title}, {"content", req.Content, &in.Content}, {"timeZone", req.TimeZone, &in.TimeZone},
		{"rrule", req.RRule, &in.RRule}} {
		if *f.dst, err = stringField(f.name, f.raw); err != nil {
			return in, err
		}
	}
	start, err := stringField("start", req.Start)
	if err != nil {
		return in, err
	}
	if start != nil {
		t, err := parseLocalDateTime(*start)
		if err != nil {
			return in, fieldError("start", err.Error())
		}
		in.Start = &t
	}
	if string(req.PublishWithin) == "null" {
		in.ClearPublishWithin = true
	} else if in.PublishWithin, err = stringField("publishWithin", req.PublishWithin); err != nil {
		return in, err
	}
	return in, nil
}

// parseLocalDateTime reads a local date-time without an offset:
// YYYY-MM-DDTHH:MM or YYYY-MM-DDTHH:MM:SS.
func parseLocalDateTime(s string) (time.Time, error) {
	for _, layout := range []string{reservation.LocalTimeLayout, "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	if _, err := parseDateTime(s); err == nil {
		return time.Time{}, fmt.Errorf("must be a local date-time without an offset, such as 2030-01-02T09:30:00 (timeZone gives the zone), got %q", s)
	}
	return time.Time{}, fmt.Errorf("must be a local date-time such as 2030-01-02T09:30:00, got %q", s)
}

// readObject reads the request body, at most MaxBodyBytes of
// application/json, into dst strictly, as readJSON reads a post.
func readObject[T any](w http.ResponseWriter, r *http.Request, dst *T) error {
	ct := r.Header.Get("Content-Type")
	mediaType, _, err := mime.ParseMediaType(ct)
	if err != nil || mediaType != "application/json" {
		return &requestError{status: http.StatusUnsupportedMediaType,
			detail: fmt.Sprintf("Content-Type must be application/json, got %q", ct)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &requestError{status: http.StatusRequestEntityTooLarge,
				detail: fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes)}
		}
		return &requestError{status: http.StatusBadRequest, detail: "could not read the request body"}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return &requestError{status: http.StatusBadRequest, detail: "request body is empty; want a JSON object"}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), decodeOptions)
	if k := dec.PeekKind(); k != '{' && k != 0 {
		return &requestError{status: http.StatusBadRequest, detail: "request body is not a JSON object"}
	}
	var v T
	if err := jsonv2.UnmarshalDecode(dec, &v, decodeOptions); err != nil {
		return jsonError(err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &requestError{status: http.StatusBadRequest, detail: "request body has data after the JSON object"}
	}
	*dst = v
	return nil
}
