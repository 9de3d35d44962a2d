package response

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// FieldError is one member of a problem's errors list (RFC 9457 section 3's
// example extension): a place in the request body, as a JSON Pointer (RFC
// 6901) such as "/posts/3/scheduledAt", and what is wrong there.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// problemWithErrors is a Problem with the errors extension.
type problemWithErrors struct {
	Problem
	Errors []FieldError `json:"errors"`
}

// WriteProblemErrors writes a problem as WriteProblem does, adding errors:
// every place of the request at fault, for a request that can be wrong in
// several places at once (a batch of posts).
func WriteProblemErrors(w http.ResponseWriter, status int, detail, field string, errs []FieldError) {
	if errs == nil {
		errs = []FieldError{}
	}
	body, err := json.Marshal(problemWithErrors{
		Problem: Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Field: field},
		Errors:  errs,
	})
	if err != nil {
		// Strings and an int always marshal.
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
