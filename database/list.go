package database

import (
	"fmt"
	"slices"
)

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
