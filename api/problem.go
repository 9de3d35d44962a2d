package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/postingsvc/posting/reservation"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object. Type is always
// "about:blank": the status code says what kind of problem it is, Title is
// the status text and Detail says what exactly went wrong.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Field names the request field at fault of a 400, as the API spells it
	// (title, content, scheduledAt, id, status, scheduledFrom, scheduledTo,
	// order, limit, cursor, or an unknown query parameter, ...).
	Field string `json:"field,omitempty"`
}

// writeProblem writes a problem response with status and detail.
func writeProblem(w http.ResponseWriter, status int, detail, field string) {
	body, err := json.Marshal(Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Field:  field,
	})
	if err != nil {
		// A struct of strings and an int always marshals.
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// requestError is a request refused before it reached the service; it is
// written as a problem with its status.
type requestError struct {
	status        int
	field, detail string
}

func (e *requestError) Error() string { return e.detail }

func fieldError(field, reason string) *requestError {
	return &requestError{status: http.StatusBadRequest, field: field, detail: field + ": " + reason}
}

// writeError answers err, which came from the service or from reading the
// request. Errors the caller can act on become 4xx with their message; any
// other error is logged and answered with a bare 500, since its text may
// name tables, hosts or queries.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var re *requestError
	var ve *reservation.ValidationError
	switch {
	case errors.As(err, &re):
		writeProblem(w, re.status, re.detail, re.field)
	case errors.As(err, &ve):
		writeProblem(w, http.StatusBadRequest, ve.Field+": "+ve.Reason, ve.Field)
	case errors.Is(err, reservation.ErrNotFound):
		writeProblem(w, http.StatusNotFound, "no post has id "+r.PathValue("id"), "")
	case errors.Is(err, reservation.ErrConflict):
		writeProblem(w, http.StatusConflict, "the post was changed by another request meanwhile; read it again and retry", "")
	case errors.Is(err, reservation.ErrInvalidTransition):
		// The service builds these messages from the post's id and status only.
		writeProblem(w, http.StatusConflict, err.Error(), "")
	default:
		level := slog.LevelError
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client went away; nobody reads this answer.
			level = slog.LevelWarn
		}
		log.LogAttrs(r.Context(), level, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		writeProblem(w, http.StatusInternalServerError, "internal server error", "")
	}
}
