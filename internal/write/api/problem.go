package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/write/reservation"
)

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
		response.WriteProblem(w, re.status, re.detail, re.field)
	case errors.As(err, &ve):
		response.WriteProblem(w, http.StatusBadRequest, ve.Field+": "+ve.Reason, ve.Field)
	case errors.Is(err, reservation.ErrNotFound):
		response.WriteProblem(w, http.StatusNotFound, "no post has id "+r.PathValue("id"), "")
	case errors.Is(err, reservation.ErrConflict):
		response.WriteProblem(w, http.StatusConflict, "the post was changed by another request meanwhile; read it again and retry", "")
	case errors.Is(err, reservation.ErrIdempotencyKeyReused):
		response.WriteProblem(w, http.StatusUnprocessableEntity,
			"Idempotency-Key: this key already created a post from another request body; use a new key for a new post",
			reservation.IdempotencyKeyField)
	case errors.Is(err, reservation.ErrIdempotencyKeyInUse):
		response.WriteProblem(w, http.StatusConflict,
			"Idempotency-Key: a request with this key is still in progress; retry it later", reservation.IdempotencyKeyField)
	case errors.Is(err, reservation.ErrInvalidTransition):
		// The service builds these messages from the post's id and status only.
		response.WriteProblem(w, http.StatusConflict, err.Error(), "")
	default:
		level := slog.LevelError
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client went away; nobody reads this answer.
			level = slog.LevelWarn
		}
		log.LogAttrs(r.Context(), level, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		response.WriteProblem(w, http.StatusInternalServerError, "internal server error", "")
	}
}
