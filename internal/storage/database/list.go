package database

import (
	"fmt"
	"slices"
	"strings"
)

// The page sizes of an operator's list (the outbox's rows, the worker's
// publications), the same for every table so the tools read alike.
const (
	// DefaultListLimit is the rows one page holds when asked for 0.
	DefaultListLimit = 50
	// MaxListLimit bounds one page.
	MaxListLimit = 1000
)

// ParseStatus returns the status named s among statuses (case-insensitive,
// surrounding white space ignored), or an error wrapping errInvalid that
// lists the valid ones: the --status or ?status= an operator typed, read
// alike for every table the operator tools list.
func ParseStatus[S ~string](s string, statuses []S, errInvalid error) (S, error) {
	up := S(strings.ToUpper(strings.TrimSpace(s)))
	if slices.Contains(statuses, up) {
		return up, nil
	}
	names := make([]string, len(statuses))
	for i, st := range statuses {
		names[i] = string(st)
	}
	return "", fmt.Errorf("%w %q: want one of %s", errInvalid, s, strings.Join(names, ", "))
}

// ListArgs checks the arguments of one page of an operator's list of rows
// of one status, and returns the limit to read: status must be one of
// statuses (else an error wrapping errInvalid); limit 0 asks for def, any
// other value must be within 1..max, so one read stays bounded.
func ListArgs[S ~string](status S, statuses []S, errInvalid error, limit, def, max int) (int, error) {
	if !slices.Contains(statuses, status) {
		return 0, fmt.Errorf("%w %q", errInvalid, status)
	}
	if limit == 0 {
		limit = def
	}
	if limit < 1 || limit > max {
		return 0, fmt.Errorf("list limit %d is outside 1..%d", limit, max)
	}
	return limit, nil
}

// EachID calls do once for each id of ids, in the order given, an id given
// twice only the first time, and returns what it returned in that order:
// the per-id outcomes of an operator's action on rows named by id.
func EachID[R any](ids []int64, do func(id int64) R) []R {
	seen := make(map[int64]bool, len(ids))
	out := make([]R, 0, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, do(id))
	}
	return out
}

// IDError is why an operator's action on rows named by id (EachID) refused
// one of them: "id 12: status SENT, only FAIL rows can be requeued". Each
// package names it for its rows (outbox.RowError, worker.PublicationError).
type IDError struct {
	// What the id names, first in the message: "id" for an outbox row,
	// "post" for a publication (keyed by its post).
	What string
	// ID is the id refused.
	ID int64
	// Reason says why, for a person.
	Reason string
	// Err is the package's sentinel, or the database error.
	Err error
}

func (e *IDError) Error() string { return fmt.Sprintf("%s %d: %s", e.What, e.ID, e.Reason) }

// Unwrap returns the sentinel, for errors.Is.
func (e *IDError) Unwrap() error { return e.Err }
