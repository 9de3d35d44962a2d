package outbox

// The operator tools: what the outbox holds, which rows wait for a person,
// and the ways to release them (requeue, discard) or to drop old history
// (purge). Each takes the caller's *gorm.DB, like the rest of the package;
// the CLI (posting outbox ...), the admin HTTP routes and the metrics
// collector all go through these functions.

import (
	"errors"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Sentinel errors of the operator tools. Per-row errors of Requeue and
// Discard wrap one of them and say which row and why.
var (
	// ErrNotFound: no outbox row has the id.
	ErrNotFound = errors.New("outbox row not found")
	// ErrNotFailed: the row is not FAIL, and only FAIL rows can be requeued
	// or discarded (the others still belong to the relay).
	ErrNotFailed = errors.New("outbox row is not FAIL")
	// ErrDiscarded: the row was discarded by an operator already.
	ErrDiscarded = errors.New("outbox row is discarded")
	// ErrConflict: the row changed between read and write (its version
	// moved); read it again.
	ErrConflict = errors.New("outbox row changed meanwhile")
	// ErrInvalidStatus: a status name outside the contract's five.
	ErrInvalidStatus = errors.New("invalid outbox status")
)

// Limits of the operator tools.
const (
	// DefaultListLimit is the number of rows List returns when asked for 0.
	DefaultListLimit = database.DefaultListLimit
	// MaxListLimit bounds one List call.
	MaxListLimit = database.MaxListLimit
	// MaxBlockingListed bounds Summary.Blocking; Summary.Blocked still counts all.
	MaxBlockingListed = 100
	// MaxPurgeBatchSize bounds the rows of one DELETE of Purge: large
	// multi-row deletes from several instances deadlock and hold locks long.
	MaxPurgeBatchSize = database.MaxPurgeBatchSize
	// DefaultRequeueBatchSize is the rows per statement of RequeueAllFailed
	// when asked for 0.
	DefaultRequeueBatchSize = 500
)

// ParseStatus returns the status named s (case-insensitive), or an error
// wrapping ErrInvalidStatus that lists the valid ones.
func ParseStatus(s string) (Status, error) {
	return database.ParseStatus(s, Statuses, ErrInvalidStatus)
}
